"""A scripted HTTP origin for tests and benches: answers set per path, every request recorded.

    origin = OriginServer().start()            # 127.0.0.1, a free port (or port=...)
    origin.script("/a.txt", body=b"hello", headers={"Cache-Control": "max-age=60"}, etag='"v1"')
    ... the node fetches http://127.0.0.1:<origin.port>/a.txt ...
    origin.requests_for("/a.txt")               # [Seen(method, target, headers, body_length), ...]
    origin.connections                          # TCP connections accepted (keep-alive reuse shows here)
    origin.stop(); origin.start()               # the same port again (a dead origin, then back)

A script (Answer) holds the status, headers and body, a delay before the
status line, a trickle rate (bytes per second) for the body, and validators:
with `etag` or `last_modified` set, a request whose If-None-Match or
If-Modified-Since matches gets a 304 without a body. A path with no script
answers 404. A script for "/path?query" matches that target only, one for
"/path" any query, one for "/prefix*" every path below (the longest wins). `chunked=True` sends the body without a
Content-Length. Answers are HTTP/1.1 keep-alive unless the request asks to
close. Standard library only; one thread per connection (ThreadingHTTPServer).

With `tls=(certfile, keyfile)` the origin speaks HTTPS; `tls_resumed` counts the
connections that resumed an earlier TLS session.
"""

import email.utils
import os
import http.server
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

from contentnode.core.buckets import BUCKET


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict = field(default_factory=dict)
    delay: float = 0.0            # seconds before the status line
    rate: float | None = None     # body bytes per second (None: at once)
    etag: str | None = None       # sent as ETag; If-None-Match matching it answers 304
    last_modified: float | None = None   # epoch seconds; sent, and If-Modified-Since at/after it answers 304
    chunked: bool = False
    close_delimited: bool = False   # no Content-Length, no chunks: the body ends when the connection closes
    interim: list = field(default_factory=list)   # (status, {fields}) answers sent before the final one
    interim_delay: float = 0.0      # seconds between the interim answers and the final one
    length: int | None = None       # the Content-Length sent instead of the body's own (an origin that lies)
    split_head: bool = False        # the status line sent alone, the rest of the head a moment later
    after: bytes = b""              # bytes past a chunked body's end, in the same write (an origin that errs)
    after_raw: bytes = b""          # bytes past a chunked body's end under TLS, not a TLS record (one that errs)


@dataclass
class Seen:
    """One request as the origin received it (header names lower-case; repeats joined with ", ")."""

    method: str
    target: str          # path and query as sent
    headers: dict
    body_length: int
    connection: int      # which accepted connection carried it (1, 2, ...)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


def _not_modified(answer: Answer, headers) -> bool:
    inm = headers.get("If-None-Match")
    if inm is not None:
        return answer.etag is not None and (inm.strip() == "*" or answer.etag in [t.strip() for t in inm.split(",")]
                                            or answer.etag.removeprefix("W/") in
                                            [t.strip().removeprefix("W/") for t in inm.split(",")])
    ims = headers.get("If-Modified-Since")
    if ims and answer.last_modified is not None:
        try:
            since = email.utils.parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError):
            return False
        return int(answer.last_modified) <= since
    return False


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *_args):
        pass

    def setup(self):
        super().setup()
        resumed = False
        if isinstance(self.request, ssl.SSLSocket):
            self.request.settimeout(10)
            self.request.do_handshake()
            resumed = self.request.session_reused
        with self.server.origin.lock:
            self.server.origin.connections += 1
            self.server.origin.tls_resumed += resumed
            self.connection_number = self.server.origin.connections

    def _body_length(self) -> int:
        """Read (and count) the request body: Content-Length or chunked."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            total = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return total
                remaining = size
                while remaining:
                    remaining -= len(self.rfile.read(min(remaining, 65536)))
                total += size
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        remaining = length
        while remaining > 0:
            data = self.rfile.read(min(remaining, 65536))
            if not data:
                break
            remaining -= len(data)
        return length - remaining

    def _handle(self):
        origin = self.server.origin
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        seen = Seen(self.command, self.path, headers, self._body_length(), self.connection_number)
        with origin.lock:
            origin.seen.append(seen)
            answer = origin.answer_for(self.path, seen.path)
        if answer.delay:
            time.sleep(answer.delay)
        for code, fields in answer.interim:   # 1xx answers first (100 Continue, 103 Early Hints)
            self.wfile.write(f"HTTP/1.1 {code} Interim\r\n".encode()
                             + b"".join(f"{k}: {v}\r\n".encode() for k, v in fields.items()) + b"\r\n")
            self.wfile.flush()
        if answer.interim_delay:
            time.sleep(answer.interim_delay)
        status, body = answer.status, answer.body
        if status == 200 and self.command in ("GET", "HEAD") and _not_modified(answer, self.headers):
            status, body = 304, b""
        self.send_response(status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.etag is not None:
            self.send_header("ETag", answer.etag)
        if answer.last_modified is not None:
            self.send_header("Last-Modified", email.utils.formatdate(answer.last_modified, usegmt=True))
        no_body = status == 304 or status < 200 or status == 204
        if answer.chunked and not no_body:
            self.send_header("Transfer-Encoding", "chunked")
        elif answer.close_delimited and not no_body:
            self.send_header("Connection", "close")
            self.close_connection = True
        elif not no_body:
            self.send_header("Content-Length", str(len(body) if answer.length is None else answer.length))
        if answer.length is not None and self.command != "HEAD" and not no_body:
            # the head and the body in one write, as a real server sends a small answer: the node's
            # first read of the answer takes the bytes past the announced length with the head
            self._headers_buffer.append(b"\r\n" + body)
            if answer.split_head:   # the node's first read finds no whole head: it reads it line by line
                self.wfile.write(self._headers_buffer.pop(0))
                self.wfile.flush()
                time.sleep(0.05)
            self.flush_headers()
            return
        self.end_headers()
        if self.command == "HEAD" or no_body:
            return
        self._send_body(body, answer)

    def _send_body(self, body: bytes, answer: Answer):
        step = len(body) if not answer.rate else max(1, int(answer.rate / 20))
        pos = 0
        while pos < len(body):
            piece = body[pos:pos + step]
            pos += len(piece)
            if answer.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            else:
                self.wfile.write(piece)
            self.wfile.flush()
            if answer.rate and pos < len(body):
                time.sleep(len(piece) / answer.rate)
        if answer.chunked:
            self.wfile.write(b"0\r\n\r\n" + answer.after)
        if answer.after_raw:
            self.wfile.flush()
            with socket.socket(fileno=os.dup(self.connection.fileno())) as raw:
                raw.sendall(answer.after_raw)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024
    origin: "OriginServer"
    tls: ssl.SSLContext | None = None

    def get_request(self):
        sock, address = super().get_request()
        with self.origin.lock:
            self.origin.open_sockets.add(sock)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def shutdown_request(self, request):
        with self.origin.lock:
            self.origin.open_sockets.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        pass   # a client going away mid-answer is normal here


class OriginServer:
    """See the module docstring."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", tls: tuple[str, str] | None = None):
        self.host, self.port = host, port
        self.lock = threading.Lock()
        self.scripts: dict[str, Answer] = {}
        self.seen: list[Seen] = []
        self.connections = 0
        self.tls_resumed = 0           # TLS connections that resumed an earlier session
        self.open_sockets: set = set()
        self._tls = tls
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://{self.host}:{self.port}"

    def script(self, path: str, body: bytes = b"", status: int = 200, headers: dict | None = None,
               **more) -> Answer:
        """Answer requests for `path` (a path, or a path with its query) with this; returns the Answer."""
        answer = Answer(status, body, dict(headers or {}), **more)
        with self.lock:
            self.scripts[path] = answer
        return answer

    def answer_for(self, target: str, path: str) -> Answer:
        """The script for a target: exact target, then path, then the longest "prefix*" script."""
        found = self.scripts.get(target) or self.scripts.get(path)
        if found is None:
            prefixes = [p for p in self.scripts if p.endswith("*") and path.startswith(p[:-1])]
            found = self.scripts[max(prefixes, key=len)] if prefixes else Answer(404, b"no script\n")
        return found

    def requests_for(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path == path or s.target == path]

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()

    def start(self) -> "OriginServer":
        self._server = _Server((self.host, self.port), _Handler)
        self._server.origin = self
        if self._tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self._tls)
            self._server.tls = context
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="origin-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop open connections (a restart keeps the port)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        with self.lock:
            sockets, self.open_sockets = list(self.open_sockets), set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self):
        return self.start() if self._server is None else self

    def __exit__(self, *_exc):
        self.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_bucket_record(url: str, **fields) -> dict:
    """An http bucket's record for `url` as the node stores it: the fields given, the others at the
    defaults the bucket table declares (core/buckets.py), filled in as the store's load does."""
    record = {"type": "http", "url": url, **fields}
    BUCKET.fill(record)
    return record
