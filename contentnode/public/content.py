"""The public content path: Host -> domain -> rule -> signature -> cache -> origin.

Redirects of a whole domain are answered by an earlier stage (domain_redirect);
this stage is the last one and answers everything that reaches it, so every
content request is counted in the traffic series. Objects come from the
cache (sendfile from the entry file) or from one shared origin fetch that
streams to the client while it fills the cache. Origin trouble becomes a
plain 502 or 504: the client never learns bucket names, keys or causes.
"""

import hashlib
import logging
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import unquote

from contentnode.core import images, rules, signing
from contentnode.core.cache import Cache
from contentnode.core.cache_fill import FillStalled, FillTruncated, OriginAnswer
from contentnode.core.hostnames import host_from_header
from contentnode.core.s3 import BucketConfig, S3Client, S3Error
from contentnode.core.settings import effective
from contentnode.core.text import http_date
from contentnode.core.traffic import Traffic
from contentnode.http.errors import ApiError, error_response
from contentnode.http.response import FileBody, Response, StreamBody

log = logging.getLogger("contentnode.content")

ORIGIN_TIMEOUT = 30.0        # a whole origin GET, headers to last byte
MAX_IMAGE_SOURCE = 64 << 20  # bytes of a source image read into memory for a transform
MAX_PATH_BYTES = 4096
READ_CHUNK = 256 * 1024
REMEMBERED_TARGETS = 4096    # resolved (host, path) targets kept per state document
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_RANGE = re.compile(r"(\d{0,18})-(\d{0,18})")


@dataclass
class Target:
    """Where a request on the public port leads."""

    host: str
    path: str
    rule_id: str
    rule: dict
    bucket: dict | None
    key: str
    variant: images.Variant | None
    ttl: int = field(init=False)
    cache_key: tuple = field(init=False)
    # (cache entry, its hit headers without Age): a remembered target serves many hits of one entry
    hit_headers: tuple = field(init=False, default=(None, None))

    def __post_init__(self):
        self.ttl = int(self.rule.get("cache_ttl", rules.DEFAULT_CACHE_TTL))
        self.cache_key = (self.host, self.path, self.variant.key() if self.variant else "")


class Delivery:
    """The content path's long-lived parts: cache, traffic series, rule index, image slots."""

    def __init__(self, app):
        self.app = app
        doc = app.store.data
        data_dir = app.config.data_dir
        self.cache = Cache(f"{data_dir}/cache", effective(doc)["cache_max_bytes"], app.clock.now,
                           processes=app.public_processes, worker_slot=app.worker_slot)
        self.traffic = Traffic(f"{data_dir}/traffic.json", app.clock.now)
        self.image_slots = threading.BoundedSemaphore(2)   # transforms are CPU bound
        self._index = (None, rules.RuleIndex([]))
        self._index_lock = threading.Lock()
        self._targets = (None, {})   # (state document, {(host, path): Target}), see remembered()

    def rule_index(self, doc) -> rules.RuleIndex:
        """The index for the current rules; rebuilt when a transaction replaced them."""
        current = doc.get("rules", {})
        source, index = self._index
        if source is not current:
            with self._index_lock:
                index = rules.RuleIndex({**r, "id": rid} for rid, r in current.items())
                self._index = (current, index)
        return index

    def remembered(self, doc, host: str, path: str) -> "Target | None":
        """The target resolved earlier for (host, path) from this very state document.

        Only targets whose outcome is a function of the document, host and path
        alone are kept (no signature, no image variant: see resolve); any change
        to the document (a new snapshot object) forgets them all.
        """
        source, targets = self._targets
        return targets.get((host, path)) if source is doc else None

    def remember(self, doc, target: "Target") -> None:
        source, targets = self._targets
        if source is not doc:
            targets = {}
            self._targets = (doc, targets)
        if len(targets) >= REMEMBERED_TARGETS:
            targets.clear()   # bounded: paths come from anonymous clients
        targets[target.host, target.path] = target

    def sync_settings(self):
        """Follow a changed cache size setting (run by the periodic job)."""
        self.cache.set_limit(effective(self.app.store.data)["cache_max_bytes"])


# ---------------------------------------------------------------- resolving


_CLEAN_PATHS = {}  # raw path -> decoded path, for paths that passed clean_path
_CLEAN_PATHS_MAX = 4096


def clean_path(raw_path: str) -> str:
    """The decoded request path, or 400 for traversal, encoded slashes, NUL and controls.

    Remembered for the last few thousand distinct good paths: the checks are a
    pure function of the raw path, and hits repeat the same paths.
    """
    path = _CLEAN_PATHS.get(raw_path)
    if path is None:
        path = _checked_path(raw_path)
        if len(_CLEAN_PATHS) >= _CLEAN_PATHS_MAX:
            _CLEAN_PATHS.clear()
        _CLEAN_PATHS[raw_path] = path
    return path


def _checked_path(raw_path: str) -> str:
    lowered = raw_path.lower()
    if len(raw_path) > MAX_PATH_BYTES or not raw_path.startswith("/"):
        raise ApiError(400, "invalid", "the path is not acceptable")
    if "%2f" in lowered or "%5c" in lowered or "\\" in raw_path:
        raise ApiError(400, "invalid", "encoded slashes and backslashes are not allowed in paths")
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "invalid", "the path is not valid UTF-8") from None
    if _CONTROL.search(path):
        raise ApiError(400, "invalid", "control characters (NUL included) are not allowed in paths")
    if rules.has_dot_segment(path):
        raise ApiError(400, "invalid", '"." and ".." segments are not allowed in paths')
    return path


def keyring(doc) -> dict | None:
    """The signed-link key ring in the state document (kept by the links API)."""
    return doc.get("links")


def resolve(delivery, host: str, path: str, query: list, client_ip: str | None,
            check_signature: bool = True) -> Target:
    """The domain, rule, bucket, key and image variant a request maps to, or an ApiError."""
    doc = delivery.app.store.data
    target = delivery.remembered(doc, host, path)
    if target is not None:
        return target
    if host not in doc.get("domains", {}):
        raise ApiError(404, "not_found", "this host is not served here")
    match = delivery.rule_index(doc).match(host, path)
    if match is None or not match.rule.get("enabled", True):
        raise ApiError(404, "not_found", "nothing is served at this path")
    params = dict(reversed(query))  # first value of each name wins
    if match.rule.get("signed") and check_signature:
        ok, reason = signing.verify(keyring(doc), host, path, params, delivery.app.clock.now(), client_ip)
        if not ok:
            code, message = SIGNATURE_MESSAGES.get(reason, ("signature_invalid", "the link is not valid"))
            raise ApiError(403, code, message)
    variant = None
    if match.rule.get("images"):
        try:
            variant = images.parse({k: v for k, v in params.items() if k not in signing.LINK_PARAMS})
        except images.ImageError as exc:
            raise ApiError(400, "invalid", str(exc), exc.field) from None
        if variant is not None and not images.available():
            raise ApiError(503, "images_unavailable",
                           f"images on the fly need the {images.EXTRA} extra on this node")
    bucket = doc.get("buckets", {}).get(match.rule.get("bucket"))
    target = Target(host, path, match.rule["id"], match.rule, bucket, match.key, variant)
    if not match.rule.get("signed") and not match.rule.get("images"):
        delivery.remember(doc, target)   # the query, the client and the time change nothing here
    return target


SIGNATURE_MESSAGES = {   # verify()'s reason -> (error code, message)
    "missing": ("signature_required", "this path needs a signed link"),
    "malformed": ("signature_invalid", "the link's signature parameters are malformed"),
    "unknown_key": ("signature_invalid", "the link was signed with a key that is no longer valid"),
    "bad_signature": ("signature_invalid", "the link's signature does not match"),
    "expired": ("link_expired", "the link has expired"),
    "ip_mismatch": ("signature_invalid", "the link is bound to another client address"),
}


# ---------------------------------------------------------------- fetching


def s3_client(app, bucket: dict) -> S3Client:
    return S3Client(BucketConfig.from_record(bucket), app.outbound, ORIGIN_TIMEOUT, app.clock.now)


def _origin_fetch(app, target: Target):
    def fetch():
        if target.bucket is None:
            raise S3Error("no_such_bucket", "the rule's bucket is gone")
        try:
            stream = s3_client(app, target.bucket).get_object(target.key)
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
        return OriginAnswer(200, meta, info.size, stream.chunks(READ_CHUNK), stream.close)
    return fetch


def _variant_fetch(delivery, target: Target, original):
    def fetch():
        source = delivery.cache.get((target.host, target.path, ""), original, target.ttl)
        if source.status != 200 or source.size > MAX_IMAGE_SOURCE:
            source.close()
            if source.status == 200:
                raise images.ImageError("the source image is too large to transform")
            return OriginAnswer(source.status)
        data = source.read_all()
        with delivery.image_slots:
            out, ctype = images.transform(data, target.variant)
        tag = hashlib.sha256(f"{source.meta.get('etag')}|{target.variant.key()}".encode()).hexdigest()
        meta = {"content_type": ctype, "etag": f'"{tag[:32]}"',
                "last_modified": source.meta.get("last_modified")}
        return OriginAnswer(200, meta, len(out), [out])
    return fetch


def fetch(delivery, target: Target):
    """The cache Result for a target; origin failures become 404, 400, 502 or 504 ApiErrors."""
    fetcher = _origin_fetch(delivery.app, target)
    if target.variant is not None:
        fetcher = _variant_fetch(delivery, target, fetcher)
    try:
        result = delivery.cache.get(target.cache_key, fetcher, target.ttl)
    except images.ImageError as exc:
        raise ApiError(400, "invalid", f"cannot transform this object: {exc}") from None
    except (S3Error, FillStalled, FillTruncated, OSError) as exc:
        raise origin_error(exc) from None
    if result.status == 404:
        raise ApiError(404, "not_found", "no such object")
    if result.status != 200:
        raise ApiError(502, "bad_gateway", "the origin could not serve this object")
    return result


def origin_error(exc) -> ApiError:
    """502 or 504 for an origin failure; the cause is logged, never sent."""
    log.warning("origin failure: %s", exc)
    timed_out = isinstance(exc, FillStalled) or getattr(exc, "code", None) == "timeout"
    if timed_out:
        return ApiError(504, "gateway_timeout", "the origin did not answer in time")
    return ApiError(502, "bad_gateway", "the origin could not be reached")


# ---------------------------------------------------------------- answering


def _etag_list_matches(header: str, etag: str | None) -> bool:
    if header.strip() == "*":
        return etag is not None
    strip = lambda tag: tag.strip().removeprefix("W/")  # noqa: E731 - weak comparison
    return etag is not None and strip(etag) in {strip(t) for t in header.split(",")}


def not_modified(headers, meta: dict) -> bool:
    """If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)."""
    inm = headers.get("If-None-Match")
    if inm is not None:
        return _etag_list_matches(inm, meta.get("etag"))
    since = http_date(headers.get("If-Modified-Since"))
    if since is None:
        return False
    modified = http_date(meta.get("last_modified"))
    return modified is not None and modified <= since


def _unsatisfiable(size: int) -> ApiError:
    return ApiError(416, "range_not_satisfiable", "the requested range cannot be served",
                    headers={"Content-Range": f"bytes */{size}"})


def byte_range(headers, size: int, meta: dict):
    """(start, end) exclusive for one satisfiable byte range, None for the whole object.

    A malformed or unsatisfiable byte range is a 416; several ranges, another
    unit and a stale If-Range get the whole object (RFC 9110 allows ignoring them).
    """
    header = headers.get("Range")
    if header is None:
        return None
    if_range = headers.get("If-Range")
    if if_range is not None and if_range.strip() not in (meta.get("etag"), meta.get("last_modified")):
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    found = _RANGE.fullmatch(spec.strip())
    if found is None or found.group(1) == found.group(2) == "" or size == 0:
        raise _unsatisfiable(size)
    first, last = found.groups()
    if not first:
        if int(last) == 0:
            raise _unsatisfiable(size)
        return max(0, size - int(last)), size
    start = int(first)
    if start >= size or (last and int(last) < start):
        raise _unsatisfiable(size)
    return start, (min(size, int(last) + 1) if last else size)


def _fixed_headers(target: Target, meta: dict, cache: str) -> list:
    ttl = target.ttl
    signed = target.rule.get("signed")
    cache_control = "no-cache" if ttl <= 0 else f"{'private' if signed else 'public'}, max-age={ttl}"
    out = [("Content-Type", meta.get("content_type") or "application/octet-stream"),
           ("Cache-Control", cache_control), ("Accept-Ranges", "bytes"),
           ("X-Content-Type-Options", "nosniff"), ("X-Cache", cache)]
    if meta.get("etag"):
        out.append(("ETag", meta["etag"]))
    if meta.get("last_modified"):
        out.append(("Last-Modified", meta["last_modified"]))
    return out


def _headers(req, target: Target, result) -> list:
    """The object's headers; a hit's are made once per cache entry and target, plus its Age."""
    if not result.hit:
        return _fixed_headers(target, result.meta, "MISS")
    entry, fixed = target.hit_headers
    if entry is not result.entry:
        entry, fixed = target.hit_headers = (result.entry, _fixed_headers(target, result.meta, "HIT"))
    return fixed + [("Age", str(max(0, int(req.app.clock.now() - entry.stored_at))))]


def object_response(req, result, target: Target) -> Response:
    """The 200, 206 or 304 answer for a cache Result (which it takes ownership of)."""
    headers = _headers(req, target, result)
    try:
        if not_modified(req.headers, result.meta):
            result.close()
            return Response(304, headers)
        span = byte_range(req.headers, result.size, result.meta)
    except ApiError:
        result.close()
        raise
    status, (start, end) = (200, (0, result.size)) if span is None else (206, span)
    if span is not None:
        headers.append(("Content-Range", f"bytes {start}-{end - 1}/{result.size}"))
    if result.body is not None:
        result.close()
        body = result.body if span is None else result.body[start:end]
    elif result.hit:
        fd, base = result.open_file()
        body = FileBody(fd, base + start, end - start, result.close)
    else:
        body = StreamBody(result.chunks(start, end), end - start, result.close)
    return Response(status, headers, body, head_only=req.method == "HEAD")


def serve(req, delivery, host) -> tuple[Response, str]:
    """The answer and whether it came from the cache ("hit") or the origin ("miss")."""
    if req.method not in ("GET", "HEAD"):
        raise ApiError(405, "method_not_allowed", "only GET and HEAD are served here",
                       headers={"Allow": "GET, HEAD"})
    path = clean_path(req.raw_path)
    target = resolve(delivery, host, path, req.query_list, req.client_ip)
    result = fetch(delivery, target)
    return object_response(req, result, target), "hit" if result.hit else "miss"


def answer(req) -> Response:
    """The last stage: serve, then count the request for its domain."""
    delivery = req.app.delivery
    host = host_from_header(req.headers.get("Host"))
    known = host in req.app.store.data.get("domains", {})
    try:
        response, cached = serve(req, delivery, host)
    except ApiError as error:
        response, cached = error_response(error), None
    except Exception:
        delivery.traffic.record(host if known else None, 500, 0)
        raise
    sent = 0 if req.method == "HEAD" or response.status == 304 else response.length
    delivery.traffic.record(host if known else None, response.status, sent, cached)
    return response

