"""A bucket as an origin (S3Origin), and the step-by-step check and probe of a bucket.

The client (core/s3.py) makes the calls; this module turns them into what the
content path and the bucket API read an origin through (core/origin.py): a
streamed answer, metadata, a check report stopped at the first failing step,
and an object's first bytes; for a rule in cache_mode "origin", a GET answered
the way the shared cache (core/shared_cache.py) reads an HTTP origin's answer,
so the object's own Cache-Control and Expires metadata count.
"""

import base64
import ssl
import time

from contentnode.core import http_cache as hc
from contentnode.core.cache_fill import CHUNK, OriginAnswer
from contentnode.core.origin import OriginError
from contentnode.core.s3 import S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.core.s3_records import ListPage
from contentnode.core.steps import Steps, elapsed_ms

PREVIEW_BYTES = 64
# the fields of an S3 GET answer a shared cache reads or a client gets: the object's own
# metadata (Cache-Control, Expires, the Content-* it was stored with) and its validators
ANSWER_FIELDS = frozenset({"cache-control", "expires", "content-type", "content-encoding", "content-language",
                           "content-disposition", "etag", "last-modified", "date"})
CONDITIONALS = frozenset({"if-none-match", "if-modified-since"})


def _step(steps: Steps, name: str, action, describe):
    """Run one check step and record it; returns (result, ok)."""
    started = time.monotonic()
    try:
        result = action()
    except S3Error as exc:
        steps.add(name, False, exc.message, started, code=exc.code)
        return None, False
    steps.add(name, True, describe(result), started)
    return result, True


def _authenticate(client: S3Client, conn) -> str:
    """A signed listing: any answer but a credential refusal proves the credentials."""
    try:
        client.list_objects(max_keys=1, conn=conn)
    except S3Error as exc:
        if exc.code != "no_such_bucket":
            raise
    return "the server accepted the signed request"


def _describe_listing(page: ListPage) -> str:
    if not page.keys:
        return "the bucket is reachable and empty"
    more = " (more exist)" if page.truncated else ""
    count = len(page.keys)
    return f"listed {count} object{'s' if count != 1 else ''}{more}, first {page.keys[0]['key']!r}"


def check_bucket(client: S3Client) -> dict:
    """Resolve, connect (and TLS), authenticate, list: stop at the first failing step."""
    cfg = client.config
    steps = Steps()
    _, ok = _step(steps, "resolve", client.resolve,
                          lambda a: f"{cfg.target(None)[1]} resolves to {', '.join(a)}")
    conn = None
    if ok:
        conn, ok = _step(steps, "connect", client.connect, _describe_connection)
    if ok:
        _, ok = _step(steps, "authenticate", lambda: _authenticate(client, conn), str)
    if ok:
        _, ok = _step(steps, "list", lambda: client.list_objects(max_keys=10), _describe_listing)
    if conn is not None:
        conn.close()
    return steps.report()


def _describe_connection(conn) -> str:
    peer = conn.sock.getpeername()
    text = f"connected to {peer[0]} port {peer[1]}"
    if isinstance(conn.sock, ssl.SSLSocket):
        text += f" over {conn.sock.version()} (certificate verified)"
    return text


def probe_object(client: S3Client, key: str) -> dict:
    """Metadata and the first bytes of one object (a ranged GET; HEAD for an empty object,
    whose byte 0 does not exist)."""
    started = time.monotonic()
    data = b""
    try:
        try:
            with client.get_object(key, (0, PREVIEW_BYTES - 1)) as stream:
                info = stream.info
                while len(data) < PREVIEW_BYTES and (chunk := stream.read(PREVIEW_BYTES - len(data))):
                    data += chunk
        except S3Error as exc:
            if exc.code != "invalid_range":
                raise
            info = client.head_object(key)
    except S3Error as exc:
        return {"ok": False, "status": exc.status, "error": exc.as_dict(), "ms": elapsed_ms(started)}
    return {"ok": True, "status": info.status, "size": info.size, "content_type": info.content_type,
            "etag": info.etag, "last_modified": info.last_modified,
            "first_bytes": base64.b64encode(data[:PREVIEW_BYTES]).decode("ascii"),
            "ms": elapsed_ms(started)}


class S3Answer:
    """An S3 GET as the shared cache reads an origin's answer (the shape of core/http_origin.py's
    OriginResponse): `status`, `headers` (pairs), `fields` (by lower-case name), `length`, the
    body's chunks, close()."""

    def __init__(self, status: int, headers: list, length: int | None, chunks, close):
        self.status, self.headers, self.fields, self.length = status, headers, hc.fields(headers), length
        self._chunks, self.close = chunks, close

    def chunks(self):
        return self._chunks

    @staticmethod
    def held_body() -> None:
        """An S3 body is always streamed (OriginResponse.held_body's shape)."""
        return None


class S3Origin:
    """A bucket as the content path and the bucket API see an origin (core/origin.py)."""

    def __init__(self, client: S3Client):
        self.client = client

    def open(self, key: str, client_host: str | None = None) -> OriginAnswer:
        try:
            stream = self.client.get_object(key)
        except S3Error as exc:
            if exc.code == "no_such_key":
                return OriginAnswer(404)
            raise
        info = stream.info
        if info.size is None:
            stream.close()
            raise S3Error("protocol", "the origin sent no length")
        meta = {"content_type": info.content_type or "application/octet-stream",
                "etag": info.etag, "last_modified": info.last_modified}
        if info.headers.get("content-encoding"):   # stored encoded: sent as it is, never compressed again
            meta["content_encoding"] = info.headers["content-encoding"]
        return OriginAnswer(200, meta, info.size, stream.chunks(CHUNK), stream.close)

    def forward(self, method: str, key: str, query: str = "", headers=(), client_host: str | None = None,
                on_interim=None) -> S3Answer:
        """A GET for the shared cache. Only the cache's conditional fields go to S3 (which answers
        them 304); an S3 key takes no query and no client Host (and S3 sends no interim answer
        for `on_interim`). A missing object is a 404 without a body; other failures raise."""
        if method != "GET":
            raise OriginError("method", "an S3 bucket is only read (GET and HEAD)", 405)
        conditions = {k.lower(): v for k, v in headers if k.lower() in CONDITIONALS}
        try:
            stream = self.client.get_object(key, conditions=conditions)
        except S3Error as exc:
            if exc.code == "no_such_key":
                return S3Answer(404, [], 0, iter(()), lambda: None)
            raise
        info = stream.info
        fields = [(k, v) for k, v in info.headers.items() if k in ANSWER_FIELDS]
        if info.status != 304 and info.size is None:
            stream.close()
            raise S3Error("protocol", "the origin sent no length")
        return S3Answer(info.status, fields, 0 if info.status == 304 else info.size, stream.chunks(CHUNK), stream.close)

    def head(self, key: str, client_host: str | None = None) -> dict:
        info = self.client.head_object(key)
        return {"status": info.status, "size": info.size, "content_type": info.content_type,
                "etag": info.etag, "last_modified": info.last_modified}

    def check(self) -> dict:
        return check_bucket(self.client)

    def probe(self, key: str) -> dict:
        return probe_object(self.client, key)
