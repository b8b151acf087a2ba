"""The public content path: Host -> domain -> rule -> signature -> cache -> origin.

Redirects of a whole domain are answered by an earlier stage (domain_redirect);
this stage is the last one and answers everything that reaches it, so every
content request is counted in the traffic series. Objects come from the
cache (sendfile from the entry file) or from one shared origin fetch that
streams to the client while it fills the cache; the cache's Result says
which body it is sent as (bytes, a file span, a stream), so this stage only
decides 200, 206 or 304. Origin trouble becomes a plain 502 or 504: the
client never learns bucket names, keys or causes. `resolve` is the one
description of a visit's decisions: warm, probe and diagnose run it too.
"""

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field

from contentnode.core import buckets, encodings, images, rules, signing
from contentnode.core.cache import Cache
from contentnode.core.cache_fill import FillStalled, FillTruncated, OriginAnswer, StreamedResult
from contentnode.core.origin import OriginError
from contentnode.core.settings import effective
from contentnode.core.text import http_date
from contentnode.core.traffic import Traffic
from contentnode.http.errors import ApiError, error_response
from contentnode.http.response import Response
from contentnode.public import visit

log = logging.getLogger("contentnode.content")

ORIGIN_TIMEOUT = 30.0        # a whole origin GET, headers to last byte
MAX_IMAGE_SOURCE = 64 << 20  # bytes of a source image read into memory for a transform
IMAGE_PIXELS_AT_ONCE = 24_000_000   # decoded pixels of the transforms running at once (~96 MB), per process
IMAGE_TRANSFORMS_AT_ONCE = 2        # transforms are CPU bound
IMAGE_SOURCES_AT_ONCE = 8           # sources held in memory, read or waiting for a transform slot
REMEMBERED_TARGETS = 4096    # resolved (host, path) targets kept per state document
_RANGE = re.compile(r"(\d{0,18})-(\d{0,18})")
_SLASHES = re.compile(r"//+")


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
    compress: bool = field(init=False)   # compressible objects go compressed to clients that accept it
    # coding ("" for identity) -> (cache entry, its hit headers without Age): a remembered target
    # serves many hits of one entry per representation
    hit_headers: dict = field(init=False, default_factory=dict)

    def __post_init__(self):
        self.ttl = int(self.rule.get("cache_ttl", rules.DEFAULT_CACHE_TTL))
        self.cache_key = (self.host, self.path, self.variant.key() if self.variant else "")
        # only what is cached is compressed (once); image variants are images
        self.compress = self.rule.get("compress", True) and self.ttl > 0 and self.variant is None


class Delivery:
    """The content path's long-lived parts: cache, traffic series, rule index, image slots."""

    def __init__(self, app):
        self.app = app
        doc = app.store.data
        data_dir = app.config.data_dir
        self.cache = Cache(f"{data_dir}/cache", effective(doc)["cache_max_bytes"], app.clock.now,
                           processes=app.public_processes, worker_slot=app.worker_slot)
        self.traffic = Traffic(f"{data_dir}/traffic.json", app.clock.now)
        self.image_budget = images.Budget(IMAGE_PIXELS_AT_ONCE, IMAGE_TRANSFORMS_AT_ONCE)
        # sources read into memory for transforms, waiting ones included: at most two of the largest
        self.image_sources = images.Budget(2 * MAX_IMAGE_SOURCE, IMAGE_SOURCES_AT_ONCE)
        # sources held in memory by compressions running at once (each held once, by its variant's fill)
        self.compressions = images.Budget(encodings.AT_ONCE * encodings.MAX_BYTES, encodings.AT_ONCE)
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


def content_path(raw_path: str, path: str) -> str:
    """The canonical decoded path, or 400 for what only content refuses: encoded slashes,
    backslashes and dot segments (a key is never reached by traversal).

    `path` is `raw_path` decoded and already free of hostile bytes (visit.py).
    Repeated slashes collapse, as in rule paths and bucket keys: `/f.txt`,
    `//f.txt` and `///f.txt` are one object, one cache entry, one purge.
    """
    if "\\" in path or "%" in raw_path and "%2f" in raw_path.lower():
        raise ApiError(400, "invalid", "encoded slashes and backslashes are not allowed in paths")
    if rules.has_dot_segment(path):
        raise ApiError(400, "invalid", '"." and ".." segments are not allowed in paths')
    return canonical_slashes(path)


def canonical_slashes(path: str) -> str:
    return _SLASHES.sub("/", path) if "//" in path else path


def clean_path(raw_path: str) -> str:
    """The decoded path of a URL given to the admin API (purge, warm, probe), or a 400 ApiError."""
    if len(raw_path) > visit.MAX_PATH_BYTES or not raw_path.startswith("/"):
        raise ApiError(400, "invalid", "the path is not acceptable")
    if visit.CONTROL.search(raw_path):
        raise ApiError(400, "invalid", "control characters (NUL included) are not allowed in paths")
    return content_path(raw_path, visit.decode_path(raw_path))


def keyring(doc) -> dict | None:
    """The signed-link key ring in the state document (kept by the links API)."""
    return doc.get("links")


class _NoTrace:
    """What resolve records into when nobody asked for a trace (every public request)."""

    @staticmethod
    def add(*_args, **_extra):
        return None


def resolve(delivery, host: str, path: str, query: list, client_ip: str | None,
            check_signature: bool = True, trace=None) -> Target:
    """The domain, rule, bucket, key and image variant a request maps to, or an ApiError.

    The public content stage, warm, probe and diagnose all run this one function;
    given a `trace` (core.steps.Steps) it records each decision as a step in
    the order a visit meets them (domain, rule, signature, image), so the
    diagnosis shows what a visitor gets, never a re-telling of it.
    """
    doc = delivery.app.store.data
    if trace is None:
        target = delivery.remembered(doc, host, path)
        if target is not None:
            return target
        trace = _NoTrace
    started = time.monotonic()
    domain = doc.get("domains", {}).get(host)
    if domain is None:
        trace.add("domain", False, f"{host} is not a domain of this node (visitors get 404)", started)
        raise ApiError(404, "not_found", "this host is not served here")
    status = domain.get("status")
    trace.add("domain", status == "verified", f"{host} is configured, status {status}"
              + ("" if status == "verified" else " (served, but its check has not passed)"), started)
    started = time.monotonic()
    match = delivery.rule_index(doc).match(host, path)
    if match is None:
        trace.add("rule", False, "no rule covers this path (visitors get 404)", started)
        raise ApiError(404, "not_found", "nothing is served at this path")
    rule = match.rule
    enabled = rule.get("enabled", True)
    trace.add("rule", enabled, f"rule {rule['id']} ({rule['path']}) maps it to key {match.key!r}"
              + ("" if enabled else ", but it is disabled (visitors get 404)"), started, rule_id=rule["id"],
              key=match.key)
    if not enabled:
        raise ApiError(404, "not_found", "nothing is served at this path")
    started = time.monotonic()
    params = dict(reversed(query))  # first value of each name wins
    if not rule.get("signed"):
        trace.add("signature", True, "this rule needs no signature", started)
    elif not check_signature:
        trace.add("signature", True, "this rule needs a signed link (not checked here)", started)
    else:
        ok, reason = signing.verify(keyring(doc), host, path, params, delivery.app.clock.now(), client_ip)
        code, message = SIGNATURE_MESSAGES.get(reason, ("signature_invalid", "the link is not valid"))
        trace.add("signature", ok, "the link's signature is valid" if ok else message, started)
        if not ok:
            raise ApiError(403, code, message)
    variant = _variant(rule, params, trace) if rule.get("images") else None
    bucket = doc.get("buckets", {}).get(rule.get("bucket"))
    target = Target(host, path, rule["id"], rule, bucket, match.key, variant)
    if not rule.get("signed") and not rule.get("images"):
        delivery.remember(doc, target)   # the query, the client and the time change nothing here
    return target


def _variant(rule, params: dict, trace) -> images.Variant | None:
    """The image variant the query asks for on an images rule (None: the original), or an ApiError."""
    started = time.monotonic()
    try:
        variant = images.parse({k: v for k, v in params.items() if k not in signing.LINK_PARAMS})
    except images.ImageError as exc:
        trace.add("image", False, str(exc), started)
        raise ApiError(400, "invalid", str(exc), exc.field) from None
    if variant is not None and not images.available():
        message = f"images on the fly need the {images.EXTRA} extra on this node"
        trace.add("image", False, message, started)
        raise ApiError(503, "images_unavailable", message)
    trace.add("image", True, f"variant {variant.key()}" if variant else "the original image", started)
    return variant


SIGNATURE_MESSAGES = {   # verify()'s reason -> (error code, message)
    "missing": ("signature_required", "this path needs a signed link"),
    "malformed": ("signature_invalid", "the link's signature parameters are malformed"),
    "unknown_key": ("signature_invalid", "the link was signed with a key that is no longer valid"),
    "bad_signature": ("signature_invalid", "the link's signature does not match"),
    "expired": ("link_expired", "the link has expired"),
    "ip_mismatch": ("signature_invalid", "the link is bound to another client address"),
}


# ---------------------------------------------------------------- fetching


def origin(app, bucket: dict):
    """The bucket's Origin (core/origin.py) with the content path's timeout."""
    return buckets.origin_for(bucket, app.folder_roots, app.outbound, app.clock.now, ORIGIN_TIMEOUT,
                              app.origin_pools, app.own_ports)


def _origin_fetch(app, target: Target):
    def fetch():
        if target.bucket is None:
            raise OriginError("no_such_bucket", "the rule's bucket is gone")
        return origin(app, target.bucket).open(target.key)
    return fetch


def _variant_fetch(delivery, target: Target, original):
    def fetch():
        source = delivery.cache.get((target.host, target.path, ""), original, target.ttl)
        if source.status != 200 or source.size > MAX_IMAGE_SOURCE:
            source.close()
            if source.status == 200:
                raise images.ImageError("the source image is too large to transform")
            return OriginAnswer(source.status)
        with delivery.image_sources.hold(source.size):
            out, ctype = images.transform(source.read_all(), target.variant, delivery.image_budget)
        tag = hashlib.sha256(f"{source.meta.get('etag')}|{target.variant.key()}".encode()).hexdigest()
        meta = {"content_type": ctype, "etag": f'"{tag[:32]}"',
                "last_modified": source.meta.get("last_modified")}
        return OriginAnswer(200, meta, len(out), [out])
    return fetch


NOT_ENCODED = 409   # a coding fill's answer when its source cannot be compressed after all


def _encoded_fetch(delivery, target: Target, coding: str, original):
    """The fill of an object's `coding` variant: its cached identity body, compressed once."""
    def fetch():
        # a source filled now expires after this; one already cached says when it does
        expires = delivery.cache.clock() + target.ttl
        source = delivery.cache.get(target.cache_key, original, target.ttl)
        if (source.status != 200 or isinstance(source, StreamedResult)
                or not encodings.compressible(source.meta, source.size)):
            source.close()   # not kept in the cache (or changed meanwhile): serve identity
            return OriginAnswer(source.status if source.status != 200 else NOT_ENCODED)
        with delivery.compressions.hold(source.size):
            out = encodings.compress(coding, source.read_all())
        meta = dict(source.meta, etag=encodings.tagged(source.meta.get("etag"), coding), encoded=coding)
        if source.hit:
            expires = source.entry.expires_at
        return OriginAnswer(200, meta, len(out), [out], expires_at=expires)
    return fetch


def fetch(delivery, target: Target, coding: str | None = None):
    """The cache Result for a target, in `coding` when the client accepts one and the object is
    compressible (result.meta's "encoded" says so; any trouble making that variant sends
    identity); origin failures become 404, 400, 502 or 504 ApiErrors."""
    fetcher = _origin_fetch(delivery.app, target)
    if target.variant is not None:
        fetcher = _variant_fetch(delivery, target, fetcher)
    result = _cached(delivery, target.cache_key, fetcher, target.ttl)
    if result.status == 404:
        raise ApiError(404, "not_found", "no such object")
    if result.status == 403:
        raise ApiError(403, "forbidden", "this object may not be read")
    if result.status != 200:
        raise ApiError(502, "bad_gateway", "the origin could not serve this object")
    if (coding is None or not target.compress or isinstance(result, StreamedResult)
            or not encodings.compressible(result.meta, result.size)):
        return result   # (a streamed object is not cached: nothing is made from it)
    try:
        # the coding fill joins this request's identity fill (if any) before this one lets it go
        encoded = _cached(delivery, target.cache_key + (coding,),
                          _encoded_fetch(delivery, target, coding, fetcher), target.ttl)
    except ApiError:
        return result
    if encoded.status != 200:
        encoded.close()
        return result
    result.close()
    return encoded


def _cached(delivery, key: tuple, fetcher, ttl: int):
    try:
        return delivery.cache.get(key, fetcher, ttl)
    except images.ImageError as exc:
        raise ApiError(400, "invalid", f"cannot transform this object: {exc}") from None
    except (OriginError, FillStalled, FillTruncated, OSError) as exc:
        raise origin_error(exc) from None


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


def _if_range_holds(validator: str, meta: dict) -> bool:
    """If-Range compares strongly (RFC 9110 13.1.5): a weak tag, sent or current, never matches,
    since a weak tag may stay while the bytes change and a range of other bytes would corrupt
    the client's copy. A date must be the Last-Modified exactly."""
    if validator.startswith(('"', "W/")):
        etag = meta.get("etag")
        return isinstance(etag, str) and etag.startswith('"') and validator == etag
    return validator == meta.get("last_modified")


def byte_range(headers, size: int, meta: dict):
    """(start, end) exclusive for one satisfiable byte range, None for the whole object.

    A malformed or unsatisfiable byte range is a 416; several ranges, another
    unit and a stale If-Range get the whole object (RFC 9110 allows ignoring them).
    """
    header = headers.get("Range")
    if header is None:
        return None
    if_range = headers.get("If-Range")
    if if_range is not None and not _if_range_holds(if_range.strip(), meta):
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


def _fixed_headers(target: Target, result, cache: str) -> list:
    meta, ttl = result.meta, target.ttl
    signed = target.rule.get("signed")
    cache_control = "no-cache" if ttl <= 0 else f"{'private' if signed else 'public'}, max-age={ttl}"
    out = [("Content-Type", meta.get("content_type") or "application/octet-stream"),
           ("Cache-Control", cache_control), ("Accept-Ranges", "bytes"),
           ("X-Content-Type-Options", "nosniff"), ("X-Cache", cache)]
    if meta.get("etag"):
        out.append(("ETag", meta["etag"]))
    if meta.get("last_modified"):
        out.append(("Last-Modified", meta["last_modified"]))
    coding = meta.get("encoded") or meta.get("content_encoding")   # the node's variant, or the origin's
    if coding:
        out.append(("Content-Encoding", coding))
    if meta.get("encoded") or target.compress and encodings.compressible(meta, result.size):
        out.append(("Vary", "Accept-Encoding"))   # every answer of an object sent compressed to some
    return out


def _headers(req, target: Target, result) -> list:
    """The object's headers; a hit's are made once per cache entry and target, plus its Age."""
    if not result.hit:
        return _fixed_headers(target, result, "MISS")
    coding = result.meta.get("encoded", "")
    entry, fixed = target.hit_headers.get(coding, (None, None))
    if entry is not result.entry:
        entry, fixed = target.hit_headers[coding] = (result.entry, _fixed_headers(target, result, "HIT"))
    return fixed + [("Age", str(max(0, int(req.app.clock.now() - entry.stored_at))))]


# representation metadata a 304 leaves out (RFC 9110 15.4.5): the cached 200's stands
_NOT_IN_304 = frozenset({"Content-Type", "Content-Encoding", "Accept-Ranges"})


def object_response(req, result, target: Target) -> Response:
    """The 200, 206 or 304 answer for a cache Result (which it takes ownership of)."""
    headers = _headers(req, target, result)
    try:
        if not_modified(req.headers, result.meta):
            result.close()
            return Response(304, [h for h in headers if h[0] not in _NOT_IN_304])
        span = byte_range(req.headers, result.size, result.meta)
    except ApiError:
        result.close()
        raise
    if span is None:
        return Response(200, headers, result.sendable(0, result.size), head_only=req.method == "HEAD")
    start, end = span
    headers.append(("Content-Range", f"bytes {start}-{end - 1}/{result.size}"))
    return Response(206, headers, result.sendable(start, end), head_only=req.method == "HEAD")


def serve(req, delivery, host) -> tuple[Response, str]:
    """The answer and whether it came from the cache ("hit") or the origin ("miss")."""
    if req.method not in ("GET", "HEAD"):
        raise ApiError(405, "method_not_allowed", "only GET and HEAD are served here",
                       headers={"Allow": "GET, HEAD"})
    path = content_path(req.raw_path, req.visit.path)
    target = resolve(delivery, host, path, req.query_list, req.client_ip)
    result = fetch(delivery, target, encodings.choose(req.headers.get("Accept-Encoding")) if target.compress else None)
    return object_response(req, result, target), "hit" if result.hit else "miss"


def answer(req) -> Response:
    """The last stage: serve, then count the request for its domain."""
    delivery = req.app.delivery
    host = req.visit.host
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

