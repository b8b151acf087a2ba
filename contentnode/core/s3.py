"""A small S3 client in the standard library (AWS Signature Version 4).

The node talks to one kind of peer for content: S3-compatible buckets (AWS,
MinIO, SeaweedFS, R2, B2...), or a folder on the node (core/folders.py). Content
needs four calls (HEAD and GET of an object, HEAD of a bucket, ListObjectsV2);
the fleet adds PUT, DELETE, a conditional GET and presigned GET URLs. A few
hundred lines of http.client and hmac replace an SDK. Every connection goes
through netguard (docs/ARCHITECTURE.md, "Trust boundaries"), and
every failure becomes an S3Error whose `code` names the cause an operator can
act on (credentials refused, no such bucket, clock skew, TLS, timeout...).
The signing itself is core/s3_sign.py, the errors core/s3_errors.py, the
records and the listing's XML core/s3_records.py; the bucket as an origin
(S3Origin, the check and probe) is core/s3_origin.py.
"""

import hashlib
import hmac
import http.client
import ssl
import time

from contentnode.core import netguard
from contentnode.core.keepalive import ConnectionPool
from contentnode.core.s3_errors import S3Error, error_from_response, transport_error
from contentnode.core.s3_records import (BucketConfig, Fetched, ListPage, ObjectInfo, object_info, parse_list,
                                         response_headers)
from contentnode.core.s3_sign import (EMPTY_SHA256, UNSIGNED_PAYLOAD, amz_date, authorization, canonical_query,
                                      canonical_request, signing_key)
from contentnode.core.text import whole_number

LIST_MAX_BYTES = 4 << 20
ERROR_MAX_BYTES = 64 << 10
DEFAULT_OBJECT_MAX_BYTES = 1 << 30
PUT_MAX_BYTES = 64 << 20  # what the node ever writes (a fleet bundle, a status) stays far below
SMALL_OBJECT_MAX_BYTES = 16 << 20  # default cap of get_bytes, which holds the whole body in memory
PRESIGN_MAX_SECONDS = 7 * 24 * 3600  # SigV4's own limit for a presigned URL


def _digits(text: str) -> bool:
    """Only ASCII digits (str.isdigit also accepts "²", which int() refuses)."""
    return text.isascii() and text.isdigit()


class ObjectStream:
    """A streamed GET answer: read it in chunks, then close (or use `with`).

    The client's timeout bounds the whole GET, headers to last byte."""

    def __init__(self, conn, response, info: ObjectInfo, deadline: float, max_bytes: int, timeout: float,
                 done=None):
        self._conn, self._response, self.info = conn, response, info
        self._done = done   # (conn, response): keeps a connection whose answer was read to its end
        self._deadline, self._left, self._timeout = deadline, max_bytes, timeout

    def read(self, size: int = 65536) -> bytes:
        if time.monotonic() > self._deadline:
            raise S3Error("timeout", "the object did not arrive in time")
        try:
            chunk = self._response.read(size)
        except (OSError, http.client.HTTPException) as exc:
            if self._conn.deadline_passed():
                raise S3Error("timeout", "the object did not arrive in time") from None
            raise transport_error(exc, self._timeout) from None
        if self._conn.deadline_passed():
            raise S3Error("timeout", "the object did not arrive in time")
        self._left -= len(chunk)
        if self._left < 0:
            raise S3Error("too_large", "the object is larger than the cap")
        return chunk

    def chunks(self, size: int = 65536):
        while chunk := self.read(size):
            yield chunk

    def close(self):
        if self._done is None:
            self._conn.close()
        else:
            self._done(self._conn, self._response)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class S3Client:
    """Calls on one bucket. `clock` gives the signing time (the daemon's clock).

    With a `pool` (core/keepalive.py) a call reuses a connection an earlier one
    read to its end; without one every call opens its own and closes it.
    """

    def __init__(self, config: BucketConfig, policy: netguard.OutboundPolicy,
                 timeout: float = netguard.DEFAULT_TIMEOUT, clock=time.time,
                 ssl_context: ssl.SSLContext | None = None, pool: ConnectionPool | None = None):
        self.config, self.policy, self.timeout = config, policy, timeout
        self.clock, self.ssl_context, self.pool = clock, ssl_context, pool

    def signed_headers(self, method: str, host_header: str, path: str, query: str,
                       extra: dict | None = None, payload_hash: str = EMPTY_SHA256) -> dict:
        date = amz_date(self.clock())
        headers = {"host": host_header, "x-amz-date": date, "x-amz-content-sha256": payload_hash}
        headers.update(extra or {})
        cfg = self.config
        headers["Authorization"] = authorization(method, path, query, headers, payload_hash,
                                                 cfg.access_key, cfg.secret_key, cfg.region, "s3", date)
        return headers

    def presign_get(self, key: str, expires_in: int) -> str:
        """A URL anyone holding it can GET `key` with, until `expires_in` seconds from now.

        Query-string SigV4 (host the only signed header, payload unsigned); the
        server refuses the URL once X-Amz-Date + X-Amz-Expires has passed.
        """
        if not 1 <= expires_in <= PRESIGN_MAX_SECONDS:
            raise S3Error("url", f"a presigned URL lives 1 to {PRESIGN_MAX_SECONDS} seconds")
        scheme, _, _, host_header, path = self.config.target(key)
        cfg = self.config
        date = amz_date(self.clock())
        scope = f"{date[:8]}/{cfg.region}/s3/aws4_request"
        params = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", f"{cfg.access_key}/{scope}"),
                  ("X-Amz-Date", date), ("X-Amz-Expires", str(expires_in)), ("X-Amz-SignedHeaders", "host")]
        query = canonical_query(params)
        creq, _ = canonical_request("GET", path, query, {"host": host_header}, UNSIGNED_PAYLOAD)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(creq.encode()).hexdigest()])
        signature = hmac.new(signing_key(cfg.secret_key, date[:8], cfg.region, "s3"), to_sign.encode(),
                             hashlib.sha256).hexdigest()
        return f"{scheme}://{host_header}{path}?{query}&X-Amz-Signature={signature}"

    def resolve(self) -> list[str]:
        """The vetted addresses of the bucket's host (the 'resolve' step of a check)."""
        _, host, port, _, _ = self.config.target(None)
        try:
            return netguard.vet_address(host, port, self.policy)
        except netguard.OutboundError as exc:
            raise transport_error(exc, self.timeout) from None

    def connect(self, key: str | None = None, deadline: float | None = None):
        """An open, vetted connection to the bucket's host (the 'connect' step of a check).

        With `deadline` (time.monotonic()), the connection is cut when it passes.
        """
        scheme, host, port, _, _ = self.config.target(key)
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        try:
            return netguard.open_connection(scheme, host, port, self.policy, self.timeout, self.ssl_context,
                                            deadline)
        except (netguard.OutboundError, OSError) as exc:
            raise transport_error(exc, self.timeout) from None

    def _send(self, method: str, key: str | None, params=(), extra: dict | None = None, conn=None,
              deadline: float | None = None, body: bytes | None = None):
        """Send one signed request; returns (conn, response, headers) with the body unread.

        The connection is cut at `deadline` (default: the client's timeout from now),
        so a server that trickles bytes cannot hold the call longer than that.
        A `body` is signed by its SHA-256 (the server checks it arrived whole).
        """
        _, _, _, host_header, path = self.config.target(key)
        query = canonical_query(params)
        payload_hash = hashlib.sha256(body).hexdigest() if body is not None else EMPTY_SHA256
        headers = self.signed_headers(method, host_header, path, query, extra, payload_hash)
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        target = path + ("?" + query if query else "")
        idle = self.pool.take(self._where()) if conn is None and self.pool is not None else None
        if idle is not None:
            idle.set_deadline(deadline)
            try:
                response = self._exchange(idle, method, target, body, headers)
                return idle, response, response_headers(response)
            except S3Error as exc:
                if exc.code == "timeout":
                    raise
                # the server closed it while it was idle: once more, on a new connection
        if conn is None:
            conn = self.connect(key, deadline)
        else:
            conn.set_deadline(deadline)
        response = self._exchange(conn, method, target, body, headers)
        return conn, response, response_headers(response)

    def _exchange(self, conn, method: str, target: str, body: bytes | None, headers: dict):
        """Send one request on `conn` and read the answer's status and headers (closing it on failure)."""
        try:
            conn.request(method, target, body=body, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            if conn.deadline_passed():
                raise S3Error("timeout", f"no answer within {self.timeout:g} s") from None
            raise transport_error(exc, self.timeout) from None
        if conn.deadline_passed():  # cut while the headers arrived: they may be incomplete
            conn.close()
            raise S3Error("timeout", f"no answer within {self.timeout:g} s")
        return response

    def _where(self) -> tuple:
        """The (scheme, host, port) this client's connections reach: the pool's key."""
        return self.config.target(None)[:3]

    def _done(self, conn, response) -> None:
        """Keep the connection for the next call when its answer was read to the end, else close it."""
        if (self.pool is not None and conn.sock is not None and response.isclosed() and not response.will_close
                and not conn.deadline_passed()):
            self.pool.give(self._where(), conn)
        else:
            conn.close()

    def _read_body(self, conn, response, limit: int, deadline: float, head_check=None) -> bytes:
        try:
            body = netguard.read_capped(response, limit, deadline, head_check)
            if conn.deadline_passed():  # a cut connection ends a close-delimited body early
                raise S3Error("timeout", f"the answer did not complete within {self.timeout:g} s")
            return body
        except netguard.OutboundError as exc:
            raise S3Error("too_large" if exc.step == "response" else exc.step, exc.message) from None
        except (OSError, http.client.HTTPException) as exc:
            if conn.deadline_passed():
                raise S3Error("timeout", f"the answer did not complete within {self.timeout:g} s") from None
            raise transport_error(exc, self.timeout) from None
        finally:
            self._done(conn, response)

    def _fail(self, conn, response, headers: dict, what: str, deadline: float) -> S3Error:
        try:
            body = self._read_body(conn, response, ERROR_MAX_BYTES, deadline)
        except S3Error:
            body = b""
        return error_from_response(response.status, headers, body, what)

    def head_object(self, key: str) -> ObjectInfo:
        deadline = time.monotonic() + self.timeout
        conn, response, headers = self._send("HEAD", key, deadline=deadline)
        if response.status >= 300:
            raise self._fail(conn, response, headers, "object", deadline)
        response.read()   # a HEAD answer has no body: this marks it complete
        self._done(conn, response)
        return object_info(response.status, headers)

    def get_object(self, key: str, byte_range: tuple[int, int | None] | None = None,
                   max_bytes: int = DEFAULT_OBJECT_MAX_BYTES, conditions: dict | None = None) -> ObjectStream:
        """Start a GET (optionally `byte_range` = (first, last or None)); the caller reads it.
        With `conditions` (lower-case if-none-match, if-modified-since) a 304 is a stream without
        a body whose info carries the fields S3 sent with it."""
        deadline = time.monotonic() + self.timeout
        extra = dict(conditions or {})
        if byte_range is not None:
            first, last = byte_range
            extra["range"] = f"bytes={first}-{'' if last is None else last}"
        conn, response, headers = self._send("GET", key, extra=extra or None, deadline=deadline)
        if response.status == 304 and conditions:
            return ObjectStream(conn, response, object_info(304, headers), deadline, 0, self.timeout, self._done)
        if response.status >= 300:
            raise self._fail(conn, response, headers, "object", deadline)
        length = headers.get("content-length", "")
        declared = whole_number(length)
        if _digits(length) and (declared is None or declared > max_bytes):
            conn.close()
            raise S3Error("too_large", f"the object's {length[:20]} bytes exceed the {max_bytes} byte cap")
        return ObjectStream(conn, response, object_info(response.status, headers), deadline, max_bytes,
                            self.timeout, self._done)

    def get_bytes(self, key: str, if_none_match: str | None = None,
                  max_bytes: int = SMALL_OBJECT_MAX_BYTES, head_check=None) -> Fetched | None:
        """A whole small object: Fetched(body, etag); with `if_none_match` (an ETag the
        caller holds) a 304 is Fetched(None, etag); a missing object is None. `head_check`:
        see netguard.read_capped (what it raises ends the read and reaches the caller)."""
        deadline = time.monotonic() + self.timeout
        extra = {"if-none-match": if_none_match} if if_none_match else None
        conn, response, headers = self._send("GET", key, extra=extra, deadline=deadline)
        if response.status == 304:
            conn.close()
            return Fetched(None, headers.get("etag") or if_none_match)
        if response.status == 404:
            error = self._fail(conn, response, headers, "object", deadline)
            if error.code == "no_such_key":
                return None
            raise error
        if response.status >= 300:
            raise self._fail(conn, response, headers, "object", deadline)
        body = self._read_body(conn, response, max_bytes, deadline, head_check)
        return Fetched(body, headers.get("etag"))

    def put_object(self, key: str, body: bytes, content_type: str, headers: dict | None = None) -> str | None:
        """Write a whole object (at most PUT_MAX_BYTES); returns the ETag the server gave it.

        `headers` go along signed (e.g. If-Match / If-None-Match where the server
        supports conditional writes: a refusal is S3Error status 412 or 409)."""
        if len(body) > PUT_MAX_BYTES:
            raise S3Error("too_large", f"an object of {len(body)} bytes exceeds the {PUT_MAX_BYTES} byte cap")
        deadline = time.monotonic() + self.timeout
        extra = {"content-type": content_type, "content-length": str(len(body)), **(headers or {})}
        conn, response, got = self._send("PUT", key, extra=extra, deadline=deadline, body=body)
        if response.status >= 300:
            raise self._fail(conn, response, got, "object", deadline)
        self._read_body(conn, response, ERROR_MAX_BYTES, deadline)
        return got.get("etag")

    def delete_object(self, key: str, headers: dict | None = None) -> None:
        """Delete one object; deleting a missing one is no error (S3 answers 204 either way)."""
        deadline = time.monotonic() + self.timeout
        conn, response, got = self._send("DELETE", key, extra=headers, deadline=deadline)
        if response.status >= 300 and response.status != 404:
            raise self._fail(conn, response, got, "object", deadline)
        self._read_body(conn, response, ERROR_MAX_BYTES, deadline)

    def list_objects(self, prefix: str = "", max_keys: int = 1000, token: str | None = None,
                     conn=None) -> ListPage:
        """One page of ListObjectsV2."""
        deadline = time.monotonic() + self.timeout
        params = [("list-type", "2"), ("max-keys", str(max_keys))]
        if prefix:
            params.append(("prefix", prefix))
        if token:
            params.append(("continuation-token", token))
        conn, response, headers = self._send("GET", None, params, conn=conn, deadline=deadline)
        if response.status >= 300:
            raise self._fail(conn, response, headers, "bucket", deadline)
        body = self._read_body(conn, response, LIST_MAX_BYTES, deadline)
        return parse_list(body)
