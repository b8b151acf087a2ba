"""One client connection as http.server runs it, and the strict parser of each request head.

RequestHandler reads a request head within the server's header_timeout (its
watchdog shuts a client that trickles it), parses it strictly within
MAX_HEAD and MAX_HEADERS, answers what it refuses as JSON (the request
smuggling defence lives here), and hands every request to the server
(http/server.py), whose one write path sends the answers. Once the head is
in, only progress counts (http/sockio.py). The admin listener runs a
handler per connection on a thread of its own (`handle`); the public
listeners (http/parking.py) make one per request (`for_turn`) and park the
connection between requests.
"""

import logging
import re
import select
import socket
import ssl
import time
from typing import Any
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from contentnode.http.errors import ApiError
from contentnode.http.request_head import MAX_HEAD, MAX_HEADERS, TOKEN, Headers, closes, percent_encoded, whole_head
from contentnode.http.response import json_response
from contentnode.http.sockio import SocketReader, SocketWriter, prepare

log = logging.getLogger("contentnode.http")

REASONS = {s.value: s.phrase for s in HTTPStatus}
INTERIM_AT_ONCE = 4096   # an interim answer this small goes at once when the socket is writable (never waits)
# A whole header line in one match: a token name, a colon, a value with no CR (RFC 9112 section 2.2:
# a bare CR is refused) and no NUL (RFC 9110 section 5.5), then CRLF or LF. Obsolete line folding
# (a line starting with a space) has no token name, so it fails too.
_HEADER_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):([^\r\n\0]*)\r?\n?")


def _send_now(sock, data: bytes) -> bytes:
    """Send what the socket takes now, never waiting; return what is left. Nothing unless poll
    says the socket is writable (a socket with a timeout would wait for that inside send, flags or
    not; poll, as select.select refuses a descriptor past 1,023 and a public listener holds up to
    max_connections of them). Then plain TCP: one send with MSG_DONTWAIT, which may take a part;
    TLS, which cannot send a part of a record without waiting for the rest: all of it (writable,
    the kernel has room for a third of its buffer, more than INTERIM_AT_ONCE)."""
    probe = select.poll()
    probe.register(sock, select.POLLOUT)
    if not probe.poll(0):
        return data
    if isinstance(sock, ssl.SSLSocket):
        sock.sendall(data)
        return b""
    try:
        return data[sock.send(data, socket.MSG_DONTWAIT):]
    except BlockingIOError:
        return data


class RequestHandler(BaseHTTPRequestHandler):
    """Parses requests with http.server and hands them to the server's dispatcher."""

    protocol_version = "HTTP/1.1"
    server_version = "contentnode"
    sys_version = ""
    server: Any   # the listener: http/server.py Server, or http/parking.py ParkingServer
    rfile: Any    # a SocketReader (http/sockio.py), not http.server's BufferedReader
    headers: Any  # a Headers (http/request_head.py), not http.server's email Message
    inline = False   # a public listener's loop thread runs this request (http/parking.py)
    deferred_request = None   # a request the loop thread parsed and deferred: its Request (http/entry.py)
    interim_unsent = b""      # interim answers the socket did not take at once: sent with the final answer

    def pass_on_interim(self, status: int, fields: list) -> None:
        """An interim answer (1xx) an origin sent for this request, passed on to an HTTP/1.1 client
        (never HTTP/1.0) now, when its socket takes it without a wait; else it leaves with the final
        answer (http/server.py write), so a client that does not read never holds up the origin's
        answer. The node's reason phrase, never the origin's; the fields come from the origin
        reader, which refuses CR, LF and NUL in them."""
        if self.request_version != "HTTP/1.1":
            return
        head = ("\r\n".join([f"HTTP/1.1 {status} {REASONS.get(status, '')}".rstrip()]
                            + [f"{name}: {value}" for name, value in fields]) + "\r\n\r\n").encode("latin-1")
        if not self.interim_unsent and len(head) <= INTERIM_AT_ONCE:
            try:
                head = _send_now(self.connection, head)
            except OSError:   # the client went away: its final answer fails the same way
                self.close_connection = True
                return
        self.interim_unsent += head   # what the socket did not take: before the final answer

    def setup(self):
        """The threaded shape (the admin listener): this handler owns the connection for its life."""
        server = self.server
        self.connection = self.request
        prepare(self.connection, max(server.send_timeout, server.idle_timeout, server.header_timeout))
        self.rfile, self.wfile = SocketReader(self.connection), SocketWriter(self.connection)
        self.served = 0

    @classmethod
    def for_turn(cls, server, sock, client_address, rfile, wfile) -> "RequestHandler":
        """A handler for one request on a connection the server keeps between requests
        (http/parking.py): nothing of a request outlives its turn."""
        handler = cls.__new__(cls)
        handler.server, handler.client_address = server, client_address
        handler.request = handler.connection = sock
        handler.rfile, handler.wfile = rfile, wfile
        return handler

    def handle(self):
        while self.await_request():
            self.handle_one_request()
            self.served += 1
            if self.close_connection:
                return

    def finish(self):
        """The server closes the socket; rfile and wfile hold nothing to flush."""

    def await_request(self) -> bool:
        """Wait on this thread for the next request's first byte: header_timeout on a new
        connection, idle_timeout between requests. False: close the connection."""
        server = self.server
        if server.closing:
            return False
        wait = server.idle_timeout if self.served else server.header_timeout
        server.watchdog.arm(self.connection, time.monotonic() + wait)
        server.set_idle(self, True)
        try:
            first = self.rfile.peek(1)
        except (OSError, ValueError):
            return False
        finally:
            server.set_idle(self, False)
            server.watchdog.disarm(self.connection)
        return bool(first) and not server.closing

    def handle_one_request(self):
        """One request whose first byte is here: its head within header_timeout, then only
        progress counts (reading a body, sending the answer: sockio.prepare)."""
        server = self.server
        self.close_connection = True
        watched = not self.inline   # the loop thread's reads never wait (SocketReader.never_wait)
        if watched:
            server.watchdog.arm(self.connection, time.monotonic() + server.header_timeout)
        try:
            parsed = self.read_head()
        except OSError:
            parsed = False
        except Exception:
            parsed = False
            log.exception("%s: request from %s failed", server.name, self.client_address[0])
        finally:
            if watched:
                server.watchdog.disarm(self.connection)
        if parsed:
            self.serve_parsed()

    def serve_parsed(self) -> None:
        """Hand the parsed request to the server. A pool thread starts here with a request the
        loop thread parsed and then deferred (http/parking.py, `resume`)."""
        self.close_connection = self.close_connection or self.server.closing
        try:
            self.server.serve_request(self)
        except OSError:
            self.close_connection = True
        except Exception:
            self.close_connection = True
            log.exception("%s: request from %s failed", self.server.name, self.client_address[0])

    def resume(self, wfile) -> None:
        """Serve on a pool thread the request the loop thread parsed and deferred (Request.may_wait),
        from where it stopped: nothing of it was answered, and its keep-alive decision stands (the
        head's, or a close the dispatcher asked for, as for a body left unread)."""
        self.inline, self.wfile = False, wfile
        self.serve_parsed()

    def read_head(self) -> bool:
        """The request line and headers: at once when the head is whole in the buffer and well-formed
        (http/request_head.py), else by the line reader, which makes every refusal. True: a request
        to serve; False: refused (answered) or the client went away, and the connection closes."""
        found = whole_head(self.rfile.held(), self.server.head_parses)
        if found is None:
            self.raw_requestline = self.rfile.readline(MAX_HEAD + 1)
            if len(self.raw_requestline) > MAX_HEAD:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return False
            return bool(self.raw_requestline) and self.parse_request()
        self.command, self.path, self.request_version, headers, size, close, framed = found
        self.headers = Headers(headers)   # the parse may be remembered (whole_head): this request's own copy
        self.rfile.skip(size)
        if framed and not self._framing_ok(headers):
            return False
        self.close_connection = close
        return True

    def parse_request(self):
        """Request line and headers line by line, strictly: http.server's email-based parser is slow
        and lenient. Obsolete line folding, malformed names, a bare CR or a NUL in a value,
        duplicate Host and conflicting Content-Length are refused (request smuggling defence).
        """
        self.command, self.request_version = None, "HTTP/1.1"
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split(" ")
        if len(words) != 3 or not TOKEN.fullmatch(words[0]) or not words[1].startswith("/"):
            self.send_error(400, "malformed request line")
            return False
        self.command, self.path, version = words[0], percent_encoded(words[1]), words[2]
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            self.send_error(505 if version.startswith("HTTP/") else 400)
            return False
        self.request_version = version
        headers = self._read_headers(MAX_HEAD - len(self.raw_requestline))
        if headers is None:
            return False
        self.headers = headers
        if not self._framing_ok(headers):
            return False
        self.close_connection = closes(version, headers)
        return True

    def _read_headers(self, budget: int) -> "Headers | None":
        """The header lines read one by one; None once a refusal is sent or the client went away."""
        headers = Headers()
        for _ in range(MAX_HEADERS + 1):
            line = self.rfile.readline(budget + 1)
            budget -= len(line)
            if budget < 0:
                self.send_error(431, f"the request head is larger than {MAX_HEAD} bytes")
                return None
            if line in (b"\r\n", b"\n"):
                return headers
            if not line:
                return None
            found = _HEADER_LINE.fullmatch(line)
            if found is None:
                self.send_error(400, "malformed header line")
                return None
            name, value = found.groups()
            if not headers.add(name.decode("ascii").lower(), value.strip().decode("latin-1")):
                self.send_error(400, "conflicting repeated header")
                return None
        self.send_error(431, "too many headers")
        return None

    def _framing_ok(self, headers) -> bool:
        """RFC 9112 §6: one unambiguous body length, or refuse and close (smuggling defence)."""
        length = dict.get(headers, "content-length")   # lower-case names: the dict's own lookup
        coding = dict.get(headers, "transfer-encoding")
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
