"""An HTTP(S) site as an origin: bucket type "http" (docs/API.md, "HTTP buckets").

A request for rule-relative key `k` goes to `<url path>/<k>` plus the query
the caller keeps, over a kept-alive connection of the origin's pool
(core/http_pool.py). Answers stream: a body is read in chunks as the caller
asks for it, never whole into memory. HttpOrigin answers the four calls of
core/origin.py (the content path's fixed-TTL cache, check, test) and, for
the shared cache and the proxy, `forward`: any method, any headers, a body
streamed from an iterable, the answer's status and headers as the origin
sent them with its body still to read.
"""

import base64
import re
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from contentnode.core import netguard
from contentnode.core.cache_fill import CHUNK, OriginAnswer
from contentnode.core.http_check import check_origin
from contentnode.core.http_pool import OriginConnection, OriginPool, OriginPools, transport_error
from contentnode.core.origin import OriginError
from contentnode.core.origin_wire import Body, ClosedBeforeAnswer, Head, read_head
from contentnode.core.steps import elapsed_ms

PREVIEW_BYTES = 64
# Fields a forwarded request never carries as given: hop-by-hop (RFC 9110 7.6.1) and the framing and
# Host this client sets itself.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
                        "proxy-connection", "proxy-authorization", "proxy-authenticate", "host",
                        "content-length"})
USER_AGENT = "contentnode"
_KEY_SAFE = "/!$&'()*+,;=:@~-._"
_LINE_BREAKING = re.compile(r"[\r\n\0]")
SMALL_BODY = 64 * 1024   # a body up to this size leaves with the request head, in one write


@dataclass(frozen=True)
class HttpOriginConfig:
    """Where an http bucket's requests go and how (the record's fields, validated by core/buckets.py,
    which declares their defaults and fills them in: from_record indexes them)."""

    scheme: str
    host: str            # name or address, without brackets
    port: int
    base: str            # the url's path without its final "/" ("" for the root)
    authority: str       # host[:port] as the url names it: the Host header of host_header "origin"
    host_header: str
    tls_verify: bool
    connect_timeout: float
    read_timeout: float

    @classmethod
    def from_record(cls, record: dict) -> "HttpOriginConfig":
        parts = urlsplit(record["url"])
        scheme = parts.scheme
        return cls(scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80),
                   parts.path.rstrip("/"), parts.netloc, record["host_header"], record["tls_verify"],
                   record["connect_timeout"], record["read_timeout"])

    def target(self, key: str, query: str = "") -> str:
        """The request target of rule-relative `key` (percent-encoded as needed) and `query`."""
        path = f"{self.base}/{quote(key, safe=_KEY_SAFE)}"
        return f"{path}?{netguard.safe_target(query)}" if query else path

    def host_for(self, client_host: str | None) -> str:
        if self.host_header == "origin":
            return self.authority
        if self.host_header == "client":
            return client_host or self.authority
        return self.host_header


class OriginResponse:
    """An origin's answer with its body unread: `status`, `headers` (pairs as sent), `fields`
    (by lower-case name, repeats joined), `length` (None when the origin sent none), `interim`
    (the statuses of the 1xx answers read before it); read/chunks stream the body; close()
    gives the connection back to the pool when the body was read whole, else closes it."""

    def __init__(self, pool: OriginPool, conn: OriginConnection, head: Head, reused: bool):
        self._pool, self._conn = pool, conn
        self.status, self.reason, self.headers, self.fields = head.status, head.reason, head.headers, head.fields
        self.length = head.length
        self.interim = head.interim
        self.reused = reused          # the connection carried an earlier answer
        self._body = Body(conn.reader, head)
        self._held = head.held
        # bytes the reader may hold past the answer, unseen by the pool's idle check: a head read line
        # by line, or a chunked body's end, can leave some in the buffer
        self._look_again = head.held < 0 or head.chunked
        self._done = False

    def header(self, name: str) -> str | None:
        """One field's value, repeats joined with ", " (None when absent)."""
        return self.fields.get(name.lower())

    def read(self, size: int = CHUNK) -> bytes:
        """Up to `size` bytes of the body (b"" at its end); OriginError when the origin fails."""
        if self._done:
            return b""
        try:
            data = self._body.read1(size)
        except Exception as exc:   # noqa: BLE001 - any failure here is the origin's: close, report
            self._finish(False)
            raise transport_error(exc) from None
        if not data and size:
            self._finish(self._body.reusable)   # the whole body was read
        return data

    def chunks(self, size: int = CHUNK):
        while data := self.read(size):
            yield data

    def held_body(self) -> bytes | None:
        """The whole body when it came in the same read as the head (a small answer): taken from
        the buffer without a wait, and the connection given back at once; None, nothing read,
        for any other."""
        length = self.length
        if self._done or length is None or length > self._held:
            return None
        data = self.read(length) if length else b""
        self.close()
        return data if len(data) == length else None

    def close(self) -> None:
        if not self._done:
            self._finish(self._body.ended and self._body.reusable)

    def _finish(self, reusable: bool) -> None:
        self._done = True
        conn = self._conn
        reusable = reusable and conn.sock is not None and not (self._look_again and conn.has_more())
        self._pool.release(conn, reusable)


def _sent_fields(headers) -> list[tuple[str, str]]:
    """The fields a request carries as given (pairs or a dict): all but HOP_BY_HOP, each name
    lower-cased once, and User-Agent added when the caller sent none."""
    sent, agent = [], False
    for name, value in headers.items() if isinstance(headers, dict) else headers:
        lower = name.lower()
        if lower not in HOP_BY_HOP:
            sent.append((name, value))
            agent = agent or lower == "user-agent"
    if not agent:
        sent.append(("User-Agent", USER_AGENT))
    return sent


class HttpOrigin:
    """An HTTP(S) origin (core/origin.py), its connections from `pools`."""

    def __init__(self, config: HttpOriginConfig, pools: OriginPools, policy: netguard.OutboundPolicy):
        self.config = config
        self.policy = policy
        self.pool = pools.pool(config.scheme, config.host, config.port, config.tls_verify,
                               config.connect_timeout, config.read_timeout, policy)

    def forward(self, method: str, key: str, query: str = "", headers=(), body: Iterable[bytes] | None = None,
                length: int | None = None, client_host: str | None = None,
                on_interim: Callable[[int, list], None] | None = None) -> OriginResponse:
        """Send one request for `key` (+ `query`) and return the answer with its body unread;
        `on_interim(status, fields)` gets each interim answer (1xx) as it comes.

        `headers` (pairs or a dict) go as given except the hop-by-hop and framing fields; Host
        follows the bucket's host_header policy (`client_host`: the Host the client sent). A body
        streams from `body` (bytes or an iterable of bytes), with Content-Length when `length` is
        given, else chunked. A reused connection that the origin had closed meanwhile is replaced
        once, when the request can be sent again (no body, or bytes).
        """
        target = self.config.target(key, query)
        sent = _sent_fields(headers)
        replayable = body is None or isinstance(body, bytes)
        if isinstance(body, bytes):
            length = len(body)
        head = self._head(method, target, client_host, sent, length, body is not None and length is None)
        for attempt in (1, 2):
            conn, reused = self.pool.acquire()
            try:
                self._send(conn, head, body, length)
                answer = read_head(conn.reader, method, on_interim)
                self.pool.remember_session(conn)
            except BaseException as exc:
                self.pool.release(conn, False)
                if reused and replayable and attempt == 1 and _stale_connection(exc):
                    continue
                raise transport_error(exc) from None
            return OriginResponse(self.pool, conn, answer, reused)
        raise AssertionError("unreachable")

    def _head(self, method, target, client_host, headers, length, chunked) -> bytes:
        """The request head as one string of bytes (sent with one write)."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.config.host_for(client_host)}"]
        lines += [f"{name}: {value}" for name, value in headers]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        elif chunked:
            lines.append("Transfer-Encoding: chunked")
        if _LINE_BREAKING.search("".join(lines)):   # never a second request in a field
            raise OriginError("invalid", "a request field holds a line break or NUL")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    @staticmethod
    def _send(conn, head: bytes, body, length) -> None:
        sock = conn.sock
        if body is None or isinstance(body, bytes) and len(body) <= SMALL_BODY:
            sock.sendall(head + body if body else head)
            return
        sock.sendall(head)
        chunked = length is None
        for piece in ([body] if isinstance(body, bytes) else body):
            if piece:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            sock.sendall(b"0\r\n\r\n")

    # ---------------------------------------------------------------- core/origin.py

    def open(self, key: str, client_host: str | None = None) -> OriginAnswer:
        """The object for the fixed-TTL cache: a 200 with a length streams; 404/410 are 404, 401/403
        are 403; any other answer (and a 200 without Content-Length) is an OriginError."""
        answer = self.forward("GET", key, client_host=client_host)
        if answer.status == 200 and answer.length is not None:
            meta = {"content_type": answer.header("content-type") or "application/octet-stream",
                    "etag": answer.header("etag"), "last_modified": answer.header("last-modified")}
            if answer.header("content-encoding"):   # already encoded: sent as it is, never compressed again
                meta["content_encoding"] = answer.header("content-encoding")
            return OriginAnswer(200, meta, answer.length, answer.chunks(), answer.close)
        answer.close()
        if answer.status in (404, 410):
            return OriginAnswer(404)
        if answer.status in (401, 403):
            return OriginAnswer(403)
        if answer.status == 200:
            raise OriginError("no_length", "the origin sent no Content-Length, which a rule in cache_mode "
                                           "\"override\" needs", 200)
        raise OriginError("status", f"the origin answered {answer.status} {answer.reason}".rstrip(), answer.status)

    def head(self, key: str, client_host: str | None = None) -> dict:
        answer = self.forward("HEAD", key, client_host=client_host)
        answer.close()
        if answer.status >= 400:
            raise OriginError("status", f"the origin answered {answer.status} {answer.reason}".rstrip(),
                              answer.status)
        length = answer.header("content-length")
        return {"status": answer.status, "size": int(length) if length and length.isdigit() else None,
                "content_type": answer.header("content-type"), "etag": answer.header("etag"),
                "last_modified": answer.header("last-modified"), "fields": answer.headers}

    def probe(self, key: str) -> dict:
        """What the origin answers a GET of `key` (any status is reported as it is), and its first bytes."""
        started = time.monotonic()
        try:
            answer = self.forward("GET", key)
            try:
                data = b""
                while len(data) < PREVIEW_BYTES and (piece := answer.read(PREVIEW_BYTES - len(data))):
                    data += piece
            finally:
                answer.close()
        except OriginError as exc:
            return {"ok": False, "status": exc.status, "error": exc.as_dict(), "ms": elapsed_ms(started)}
        ok = 200 <= answer.status < 400
        out: dict[str, object] = {"ok": ok, "status": answer.status, "size": answer.length,
               "content_type": answer.header("content-type"), "etag": answer.header("etag"),
               "last_modified": answer.header("last-modified"),
               "first_bytes": base64.b64encode(data).decode("ascii"), "ms": elapsed_ms(started)}
        if not ok:
            out["error"] = {"code": "status", "message": f"the origin answered {answer.status}",
                            "status": answer.status}
        return out

    def check(self) -> dict:
        return check_origin(self.config, self.policy)


def _stale_connection(exc: BaseException) -> bool:
    """A kept-alive connection the origin closed before this request reached it."""
    return isinstance(exc, (ClosedBeforeAnswer, BrokenPipeError, ConnectionResetError,
                            ConnectionAbortedError)) and not isinstance(exc, ssl.SSLError)
