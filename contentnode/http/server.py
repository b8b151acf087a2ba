"""A bounded, time-limited HTTP/1.1 server on top of http.server.

CPython's http.server is a good parser but a poor front door: HTTP/1.0 by
default, no timeouts, a thread for every connection without limit, and an
automatic `100 Continue`. This module keeps its parser and fixes the rest:

- HTTP/1.1 keep-alive; one write path that always sets Content-Length;
- a cap on connections (over it: 503 and close, never an unbounded thread);
- a cap on the whole request head (MAX_HEAD), so an unfinished request holds
  at most that much, and strict framing: a malformed Content-Length is 400, a
  transfer coding other than plain `chunked` is 501, both framings at once 400;
- no exception ends a connection silently: it is logged once and answered 500;
- an idle timeout between requests and a total deadline for reading one
  request (a watchdog shuts the socket of a client that sends one byte a second);
- TLS handshakes in the worker thread, not in the accept loop;
- graceful shutdown: stop accepting, drop idle connections, let in-flight
  requests finish.
"""

import email.utils
import io
import logging
import os
import re
import socket
import ssl
import struct
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from contentnode import oscalls
from contentnode.http.errors import ApiError
from contentnode.http.response import FileBody, Response, StreamBody, json_response
from contentnode.logs import path_value

log = logging.getLogger("contentnode.http")

_REASONS = {s.value: s.phrase for s in HTTPStatus}
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_RAW_TARGET_BYTE = re.compile(r"[^\x21-\x7e]")  # a byte RFC 9112 never lets a request target carry raw


class ConnectionWatchdog(threading.Thread):
    """Shuts down sockets whose request-reading deadline has passed."""

    def __init__(self, interval: float = 0.25):
        super().__init__(name="http-watchdog", daemon=True)
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._interval = interval
        self._stopped = threading.Event()

    def arm(self, sock, deadline: float) -> None:
        with self._lock:
            self._deadlines[sock] = deadline

    def disarm(self, sock) -> None:
        with self._lock:
            self._deadlines.pop(sock, None)

    def run(self) -> None:
        while not self._stopped.wait(self._interval):
            now = time.monotonic()
            with self._lock:
                late = [s for s, d in self._deadlines.items() if d <= now]
                for sock in late:
                    del self._deadlines[sock]
            for sock in late:
                _shutdown(sock)

    def stop(self) -> None:
        self._stopped.set()


def _shutdown(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _internal_error(handler) -> Response:
    """The answer to an exception nobody else caught; the connection closes after it."""
    handler.close_connection = True
    return handler.server.own_answer(json_response({"error": {"code": "internal", "message": "internal error"}}, 500))


def check_header(name: str, value: str) -> None:
    """Refuse header injection: a name must be a token, a value free of CR, LF and NUL."""
    if "\n" in value or "\r" in value or "\0" in value or not _TOKEN.fullmatch(name):
        raise ValueError(f"unsafe header {name!r}")


_CHECKED_LINES: dict[tuple[str, object], str] = {}  # (name, value) -> "name: value", already passed check_header
_CHECKED_LINES_MAX = 4096


def header_line(name: str, value) -> str:
    """`name: value` for a response header, checked once per distinct pair (most repeat)."""
    try:
        return _CHECKED_LINES[name, value]
    except KeyError:
        pass
    text = str(value)
    check_header(name, text)
    if len(_CHECKED_LINES) >= _CHECKED_LINES_MAX:
        _CHECKED_LINES.clear()   # bounded: values like Age or Content-Range vary
    line = _CHECKED_LINES[name, value] = f"{name}: {text}"
    return line


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


_date = (0, "")  # (second, its Date text), replaced whole so a reader never sees half of it


def http_date() -> str:
    """The Date header, formatted once a second rather than once a request."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True))
    return _date[1]


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

        Obsolete line folding, malformed names, duplicate Host and conflicting
        Content-Length are refused (request smuggling defence).
        """
        self.command, self.request_version = None, "HTTP/1.1"
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split(" ")
        if len(words) != 3 or not _TOKEN.fullmatch(words[0]) or not words[1].startswith("/"):
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
            if not colon or not _TOKEN.fullmatch(name.decode("latin-1")):
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
        error = ApiError(code, codes.get(code, "bad_request"), message or _REASONS.get(code, "error"))
        if not getattr(self, "command", None):
            self.command = "GET"
        self.server.write(self, self.server.own_answer(json_response(error.body(), code)))

    def log_message(self, format, *args):
        """Request lines are logged once by the server, not by http.server."""


class Server(ThreadingHTTPServer):
    """One listener (admin, public or TLS) with bounded workers and timeouts.

    `dispatch(request_handler) -> Response` is supplied by the caller; it builds
    the Request and runs the router or public dispatcher. `headers` are the
    listener's own header set (the admin port's security headers): the
    dispatcher adds them to what it answers, and own_answer() to the answers
    no dispatcher sees (parser errors, 503 overloaded, a 500 from a crash).
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, dispatch, name: str, max_connections: int = 256,
                 request_timeout: float = 10.0, idle_timeout: float = 60.0,
                 tls_context: ssl.SSLContext | None = None, on_request=None, sock=None, headers=()):
        self.name = name
        self.headers = tuple(headers)
        self.dispatch = dispatch
        self.on_request = on_request
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.tls_context = tls_context
        self.closing = False
        self.draining = False  # the node is going away: every answer closes its connection
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._handlers: dict[RequestHandler, bool] = {}  # handler -> idle flag
        self.watchdog = ConnectionWatchdog()
        self._serving = False
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        if sock is None:
            super().__init__(address, RequestHandler)
        else:  # a listening socket bound by another process (a public worker's inherited socket)
            super().__init__(address, RequestHandler, bind_and_activate=False)
            self.socket.close()
            # Non-blocking: when another process accepts the connection that woke this
            # one, accept() here fails with EAGAIN instead of blocking the accept loop
            # (and its stop) until the next connection arrives.
            sock.setblocking(False)
            self.socket = sock
            self.server_address = sock.getsockname()

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """The watchdog runs only while the listener serves: a bound socket that another
        process serves (public workers) leaves no thread behind. A listener closed before its
        accept thread got here (a node stopped as soon as it started) is not served at all."""
        with self._lock:
            if self.closing:
                return
            self._serving = True
        self.watchdog.start()
        super().serve_forever(poll_interval)

    # --- connections -------------------------------------------------------

    def process_request(self, request, client_address):
        if self.closing or not self._slots.acquire(blocking=False):
            self._refuse_overloaded(request)
            return
        thread = threading.Thread(target=self._work, args=(request, client_address),
                                  name=f"{self.name}-worker", daemon=True)
        thread.start()

    def own_answer(self, response: Response) -> Response:
        """An answer this server makes itself, with the listener's header set."""
        response.headers.extend(self.headers)
        return response

    def _refuse_overloaded(self, request):
        if self.tls_context is None:
            body = b'{"error":{"code":"overloaded","message":"too many connections; try again"}}\n'
            own = "".join(header_line(name, value) + "\r\n" for name, value in self.headers).encode("latin-1")
            head = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" + own +
                    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body))
            try:
                request.settimeout(1.0)
                request.sendall(head + body)
            except OSError:
                pass
        self.shutdown_request(request)

    def _work(self, request, client_address):
        try:
            handler = None
            try:
                handler = self.RequestHandlerClass.__new__(self.RequestHandlerClass)
                with self._lock:
                    self._handlers[handler] = False
                handler.__init__(request, client_address, self)
            except (ConnectionAbortedError, ConnectionResetError, BrokenPipeError, TimeoutError):
                pass
            except Exception:
                log.exception("%s: connection from %s failed", self.name, client_address[0])
            finally:
                with self._lock:
                    self._handlers.pop(handler, None)
            self.shutdown_request(getattr(handler, "request", request) if handler else request)
        finally:
            self._slots.release()

    def set_idle(self, handler, idle: bool):
        with self._lock:
            self._handlers[handler] = idle
        if idle and self.closing:
            _shutdown(handler.connection)

    def active_requests(self) -> int:
        with self._lock:
            return sum(1 for idle in self._handlers.values() if not idle)

    def close_gracefully(self, grace: float = 30.0) -> None:
        """Stop accepting, close idle keep-alive connections, wait for in-flight requests."""
        with self._lock:
            self.closing = True
            serving = self._serving
        if serving:
            self.shutdown()
        self.server_close()
        with self._lock:
            idle = [h.connection for h, is_idle in self._handlers.items() if is_idle]
        for sock in idle:
            _shutdown(sock)
        deadline = time.monotonic() + grace
        while self.active_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.watchdog.stop()

    # --- requests ------------------------------------------------------------

    def serve_request(self, handler) -> None:
        started = time.monotonic()
        try:
            response = self.dispatch(handler)
        except (ConnectionError, TimeoutError):
            handler.close_connection = True
            return
        except Exception:
            log.exception("%s: request failed: %s %s", self.name, handler.command, path_value(handler.path))
            response = _internal_error(handler)
        if response is None:
            return
        self.write(handler, response)
        if self.on_request is not None:
            self.on_request(self.name, handler, response, time.monotonic() - started)

    def write(self, handler, response: Response) -> None:
        """The one write path: status line, safe headers, Content-Length, body.

        A head that cannot be written (a header with CR/LF, text that is not
        Latin-1) is found before a byte is sent: logged, and answered 500.
        """
        try:
            head = self._head(handler, response)
        except Exception:
            log.exception("%s: response to %s %s cannot be sent", self.name, handler.command,
                          path_value(handler.path))
            if not isinstance(response.body, bytes):
                response.body.close()
            response = _internal_error(handler)
            head = self._head(handler, response)
        body = response.body
        bodyless = response.status in (204, 304) or 100 <= response.status < 200
        send_body = not bodyless and handler.command != "HEAD" and not response.head_only
        try:
            if isinstance(body, bytes):
                handler.wfile.write(head + body if send_body else head)
            elif isinstance(body, FileBody):
                if send_body and body.length and not isinstance(handler.connection, ssl.SSLSocket):
                    # MSG_MORE: the head leaves with the file's first bytes, not in a packet of its own
                    handler.connection.sendall(head, socket.MSG_MORE)
                else:
                    handler.wfile.write(head)
                if send_body:
                    self._send_file(handler, body)
            elif isinstance(body, StreamBody):
                handler.wfile.write(head)
                if send_body:
                    self._send_stream(handler, body)
        finally:
            if not isinstance(body, bytes):
                body.close()
        handler.bytes_sent = len(head) + (response.length if send_body else 0)

    def _head(self, handler, response: Response) -> bytes:
        status = response.status
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
                 "Server: contentnode",
                 f"Date: {http_date()}"]
        lines += [header_line(name, value) for name, value in response.headers]
        if not (status in (204, 304) or 100 <= status < 200):
            lines.append(f"Content-Length: {response.length}")
        if handler.close_connection or self.closing or self.draining:
            handler.close_connection = True
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_file(self, handler, body: FileBody) -> None:
        """sendfile where the kernel can (plain TCP, not refused), else read and send in chunks."""
        sock, offset, left = handler.connection, body.offset, body.length
        kernel_copy = not isinstance(sock, ssl.SSLSocket) and not oscalls.was_refused("sendfile")
        if kernel_copy:
            try:
                while left > 0:
                    sent = os.sendfile(sock.fileno(), body.fd, offset, left)
                    if sent == 0:
                        break
                    offset += sent
                    left -= sent
            except OSError as exc:
                if not oscalls.is_refusal(exc):
                    raise
                oscalls.note_refused("sendfile", exc.errno, "files are read and sent in chunks")
                kernel_copy = False
        while left > 0 and not kernel_copy:
            chunk = os.pread(body.fd, min(left, 65536), offset)
            if not chunk:
                break
            sock.sendall(chunk)
            offset += len(chunk)
            left -= len(chunk)
        if left:
            handler.close_connection = True

    def _send_stream(self, handler, body: StreamBody) -> None:
        sent = 0
        try:
            for chunk in body.chunks:
                chunk = chunk[: body.length - sent]
                if chunk:
                    handler.wfile.write(chunk)
                    sent += len(chunk)
        except OSError as exc:  # the client went away, or the origin did: nothing to add to the log
            log.debug("%s: streaming a response ended early: %s", self.name, exc)
        except Exception:
            log.exception("%s: streaming a response failed", self.name)
        if sent != body.length:
            handler.close_connection = True
