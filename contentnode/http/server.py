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
- deadlines that follow progress: a request head within header_timeout (a
  watchdog shuts the socket of a client that sends one byte a second), an
  idle timeout between requests, and after the head only a client that moves
  no byte for send_timeout is cut (http/sockio.py);
- graceful shutdown: stop accepting, drop idle connections, let in-flight
  requests finish.

This module is the listener in its threaded shape (a thread per connection,
kept by the admin listener), its bookkeeping and the one write path; the
public listeners' shape (idle connections parked, a pool of threads) is
http/parking.py; a connection's requests and the strict parser of a request
head are http/connection.py.
"""

import email.utils
import logging
import os
import socket
import ssl
import threading
import time
from http.server import ThreadingHTTPServer

from contentnode import oscalls
from contentnode.http.connection import REASONS, TOKEN, RequestHandler
from contentnode.http.response import FileBody, Response, StreamBody, json_response
from contentnode.logs import path_value

log = logging.getLogger("contentnode.http")


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
    if "\n" in value or "\r" in value or "\0" in value or not TOKEN.fullmatch(name):
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


_date = (0, b"")  # (second, its Date text), replaced whole so a reader never sees half of it


def http_date() -> bytes:
    """The Date header's value, formatted once a second rather than once a request."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode("ascii"))
    return _date[1]


_HEADS: dict[tuple, tuple] = {}   # (status, headers, bodyless, length, close) -> _head_parts()
_HEADS_MAX = 4096


def _head_parts(status: int, headers, bodyless: bool, length: int | None, close: bool) -> tuple:
    """The head's bytes before and after the Date value, its header lines checked; (whole, None)
    when the answer carries its own Date (a cache answers with its stored answer's)."""
    lines = [header_line(name, value) for name, value in headers]
    if not bodyless and length is not None:
        lines.append(f"Content-Length: {length}")
    if close:
        lines.append("Connection: close")
    first = f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\nServer: contentnode\r\n"
    rest = "".join(line + "\r\n" for line in lines) + "\r\n"
    if any(name.lower() == "date" for name, _ in headers):
        return (first + rest).encode("latin-1"), None
    return first.encode("latin-1") + b"Date: ", ("\r\n" + rest).encode("latin-1")


def overloaded_answer(headers, message: str) -> bytes:
    """The whole 503 a listener sends on its own when it refuses a connection."""
    body = b'{"error":{"code":"overloaded","message":"%s; try again"}}\n' % message.encode()
    own = "".join(header_line(name, value) + "\r\n" for name, value in headers).encode("latin-1")
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" + own +
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


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
                 header_timeout: float = 10.0, idle_timeout: float = 60.0, send_timeout: float = 60.0,
                 on_request=None, sock=None, headers=()):
        self.name = name
        self.headers = tuple(headers)
        self.dispatch = dispatch
        self.on_request = on_request
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.send_timeout = send_timeout
        self.max_connections = max_connections
        self.closing = False
        self.draining = False  # the node is going away: every answer closes its connection
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._handlers: dict[RequestHandler, bool] = {}  # handler -> idle flag
        self.head_parses: dict[bytes, tuple] = {}   # heads met again byte for byte (http/request_head.py)
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
        try:
            request.settimeout(1.0)
            request.sendall(overloaded_answer(self.headers, "too many connections"))
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

    def stop_accepting(self) -> None:
        """The first step of a graceful close: no new connection, answers say Connection: close."""
        with self._lock:
            self.closing = True
            serving = self._serving
        if serving:
            self.shutdown()
        self.server_close()

    def close_gracefully(self, grace: float = 30.0) -> None:
        """Stop accepting, close idle keep-alive connections, wait for in-flight requests."""
        self.stop_accepting()
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
        Latin-1) is found before a byte is sent: logged, and answered 500. An
        answer given again carries the head made the first time (`Response.head`),
        sent unless this connection closes after it (its head then says so).
        """
        head = response.head
        if head is None or handler.close_connection or self.closing or self.draining:
            response, head = self._made_head(handler, response)
            if response.keep is not None and not handler.close_connection:
                response.keep(head)
        if handler.interim_unsent:   # interim answers the client's socket did not take at once
            head, handler.interim_unsent = handler.interim_unsent + head, b""
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
        handler.bytes_sent = len(head) + ((response.length or 0) if send_body else 0)

    def _made_head(self, handler, response: Response) -> tuple[Response, bytes]:
        """The answer and its head; a 500 and its head when the answer's cannot be written."""
        try:
            return response, self._head(handler, response)
        except Exception:
            log.exception("%s: response to %s %s cannot be sent", self.name, handler.command,
                          path_value(handler.path))
            if not isinstance(response.body, bytes):
                response.body.close()
            response = _internal_error(handler)
            return response, self._head(handler, response)

    def _head(self, handler, response: Response) -> bytes:
        """The answer's head. Its lines but Date are a pure function of the status, the headers,
        the length and whether the connection closes: made and checked once per distinct set
        (a hit's repeat but for Age), then only today's Date is put in."""
        status = response.status
        bodyless = status in (204, 304) or 100 <= status < 200
        length = None if bodyless else response.length
        if length is None and not bodyless:
            handler.close_connection = True   # no length to announce: the close ends the body
        close = handler.close_connection = handler.close_connection or self.closing or self.draining
        try:
            key = (status, tuple(response.headers), bodyless, length, close)
            made = _HEADS.get(key)
        except TypeError:   # a header given as a list (unhashable): made every time
            key, made = None, None
        if made is None:
            made = _head_parts(status, response.headers, bodyless, length, close)
            if key is not None:
                if len(_HEADS) >= _HEADS_MAX:
                    _HEADS.clear()   # bounded: Age and Content-Range vary
                _HEADS[key] = made
        first, rest = made
        return first if rest is None else first + http_date() + rest

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
            handler.wfile.write(chunk)
            offset += len(chunk)
            left -= len(chunk)
        if left:
            handler.close_connection = True

    def _send_stream(self, handler, body: StreamBody) -> None:
        sent = 0
        try:
            for chunk in body.chunks:
                chunk = chunk[: body.length - sent] if body.length is not None else chunk
                if chunk:
                    handler.wfile.write(chunk)
                    sent += len(chunk)
        except OSError as exc:  # the client went away, or the origin did: nothing to add to the log
            log.debug("%s: streaming a response ended early: %s", self.name, exc)
        except Exception:
            log.exception("%s: streaming a response failed", self.name)
        if sent != body.length:   # (always, for a length never announced)
            handler.close_connection = True
