"""One client connection as http.server runs it, and the strict parser of each request head.

RequestHandler does the TLS handshake in the worker thread, reads requests
one after the other on a keep-alive connection (idle and request deadlines
kept by the server's watchdog), parses each head strictly within MAX_HEAD and
MAX_HEADERS, answers what it refuses as JSON (the request smuggling defence
lives here), and hands every request to the server (http/server.py), whose
one write path sends the answers.
"""

import io
import logging
import re
import socket
import ssl
import struct
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from contentnode.http.errors import ApiError
from contentnode.http.response import json_response

log = logging.getLogger("contentnode.http")

REASONS = {s.value: s.phrase for s in HTTPStatus}
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_RAW_TARGET_BYTE = re.compile(r"[^\x21-\x7e]")  # a byte RFC 9112 never lets a request target carry raw

MAX_HEADERS = 100
MAX_HEAD = 65536  # request line and header lines together; worst case per connection


class Headers(dict):
    """Request headers by lower-case name; a repeated header is joined as RFC 9110 allows."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name):
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name):
        return dict.__contains__(self, name.lower())

    def add(self, name: str, value: str) -> bool:
        """Add one header line; False when a repeat is not allowed (Host, differing Content-Length)."""
        if not dict.__contains__(self, name):
            dict.__setitem__(self, name, value)
            return True
        if name == "host" or name == "content-length":
            return name == "content-length" and dict.__getitem__(self, name) == value
        joiner = "; " if name == "cookie" else ", "
        dict.__setitem__(self, name, dict.__getitem__(self, name) + joiner + value)
        return True


class SocketWriter(io.BufferedIOBase):
    """The handler's wfile: every write sends everything (sendall), never a partial write."""

    def __init__(self, sock):
        self._sock = sock

    def writable(self):
        return True

    def write(self, data):
        self._sock.sendall(data)
        return len(data)


def _percent_encoded(target: str) -> str:
    """The target with every raw non-ASCII or control byte percent-encoded (the request line
    was read as Latin-1, one character per byte). Every later step then sees one spelling:
    raw UTF-8 works as its encoded form does, and invalid UTF-8 or a control byte is
    refused where its encoded form is, never passed on decoded as Latin-1."""
    if _RAW_TARGET_BYTE.search(target) is None:
        return target
    return _RAW_TARGET_BYTE.sub(lambda found: f"%{ord(found.group()):02X}", target)


class RequestHandler(BaseHTTPRequestHandler):
    """Parses requests with http.server and hands them to the server's dispatcher."""

    protocol_version = "HTTP/1.1"
    server_version = "contentnode"
    sys_version = ""

    def setup(self):
        server = self.server
        if server.tls_context is not None:
            self.request.settimeout(server.request_timeout)
            try:
                tls = server.tls_context.wrap_socket(self.request, server_side=True,
                                                     do_handshake_on_connect=False)
                server.watchdog.arm(tls, time.monotonic() + server.request_timeout)
                try:
                    tls.do_handshake()
                finally:
                    server.watchdog.disarm(tls)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS handshake with %s failed: %s", self.client_address[0], exc)
                raise ConnectionAbortedError from None
            self.request = tls
        self.connection = self.request
        # Blocking sockets: no poll() before every read and write. The watchdog
        # enforces the idle and request deadlines; the kernel's send timeout
        # cuts off a client that stops reading.
        self.connection.settimeout(None)
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                                   struct.pack("ll", int(server.idle_timeout), 0))
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.connection.makefile("rb", -1)
        self.wfile = SocketWriter(self.connection)

    def handle(self):
        self.close_connection = True
        self.handle_one_request()
        while not self.close_connection:
            self.handle_one_request()

    def handle_one_request(self):
        server = self.server
        self.close_connection = True
        if server.closing:
            return
        server.watchdog.arm(self.connection, time.monotonic() + server.idle_timeout)
        server.set_idle(self, True)
        try:
            first = self.rfile.peek(1)
        except (OSError, ValueError):
            return
        finally:
            server.set_idle(self, False)
        if not first or server.closing:
            return
        server.watchdog.arm(self.connection, time.monotonic() + server.request_timeout)
        try:
            self.raw_requestline = self.rfile.readline(MAX_HEAD + 1)
            if len(self.raw_requestline) > MAX_HEAD:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.raw_requestline or not self.parse_request():
                return
            self.close_connection = self.close_connection or server.closing
            server.serve_request(self)
        except OSError:
            self.close_connection = True
        except Exception:
            self.close_connection = True
            log.exception("%s: request from %s failed", server.name, self.client_address[0])
        finally:
            server.watchdog.disarm(self.connection)

    def parse_request(self):
        """Request line and headers, strictly: http.server's email-based parser is slow and lenient.

        Obsolete line folding, malformed names, a bare CR in a value, duplicate Host and
        conflicting Content-Length are refused (request smuggling defence).
        """
        self.command, self.request_version = None, "HTTP/1.1"
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split(" ")
        if len(words) != 3 or not TOKEN.fullmatch(words[0]) or not words[1].startswith("/"):
            self.send_error(400, "malformed request line")
            return False
        self.command, self.path, version = words[0], _percent_encoded(words[1]), words[2]
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self.send_error(505 if version.startswith("HTTP/") else 400)
            return False
        self.request_version = version
        headers = Headers()
        budget = MAX_HEAD - len(self.raw_requestline)
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(budget + 1)
            budget -= len(line)
            if budget < 0:
                self.send_error(431, f"the request head is larger than {MAX_HEAD} bytes")
                return False
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                return False
            name, colon, value = line.partition(b":")
            bare_cr = b"\r" in value.removesuffix(b"\n").removesuffix(b"\r")  # RFC 9112 section 2.2
            if not colon or not TOKEN.fullmatch(name.decode("latin-1")) or bare_cr:
                self.send_error(400, "malformed header line")
                return False
            if not headers.add(name.decode("ascii").lower(), value.strip().decode("latin-1")):
                self.send_error(400, "conflicting repeated header")
                return False
        else:
            self.send_error(431, "too many headers")
            return False
        self.headers = headers
        if not self._framing_ok(headers):
            return False
        connection = headers.get("connection", "").lower()
        self.close_connection = ("close" in connection if version == "HTTP/1.1"
                                 else "keep-alive" not in connection)
        return True

    def _framing_ok(self, headers) -> bool:
        """RFC 9112 §6: one unambiguous body length, or refuse and close (smuggling defence)."""
        length = headers.get("content-length")
        coding = headers.get("transfer-encoding")
        if length is not None and not (length.isascii() and length.isdigit()):
            self.send_error(400, "Content-Length is malformed")
            return False
        if coding is not None and coding.strip().lower() != "chunked":
            self.send_error(501, "the only transfer coding accepted is chunked")
            return False
        if coding is not None and length is not None:
            self.send_error(400, "Content-Length and Transfer-Encoding together are refused")
            return False
        return True

    def handle_expect_100(self):
        """Never continue automatically: the router sends it after its checks pass."""
        return True

    def send_continue(self):
        self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def body_read(self):
        """The request is fully read; the handler may now take its time."""
        self.server.watchdog.disarm(self.connection)

    def send_error(self, code, message=None, explain=None):
        """Parser-level errors (bad request line, huge headers) as JSON, then close."""
        self.close_connection = True
        codes = {400: "bad_request", 414: "uri_too_long", 431: "headers_too_large",
                 501: "not_implemented", 505: "http_version_not_supported"}
        error = ApiError(code, codes.get(code, "bad_request"), message or REASONS.get(code, "error"))
        if not getattr(self, "command", None):
            self.command = "GET"
        self.server.write(self, self.server.own_answer(json_response(error.body(), code)))

    def log_message(self, format, *args):
        """Request lines are logged once by the server, not by http.server."""
