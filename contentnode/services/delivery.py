"""The content engine: Host -> domain -> rule -> signature -> cache -> origin.

The public port's content stage (public/content.py) and the admin API's purge,
warm, probe and diagnose (api/delivery.py) run it; it answers with cache
Results and Targets, and refuses with NotServed (status, code, message), which
each caller turns into its own answer. `resolve` is the one description of a
visit's decisions: warm, probe and diagnose run it too. Objects come from the
cache or from one shared origin fetch that fills it; origin trouble becomes a
plain 502 or 504 NotServed: the client never learns bucket names, keys or causes.
Each bucket's origin is made once (Origins) and keeps its connections alive.
"""

import copy
import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass, field

from contentnode.core import buckets, edge_rules, encodings, images, rules, signing
from contentnode.core.cache import Cache
from contentnode.core.cache_fill import FillStalled, FillTruncated, OriginAnswer, StreamedResult
from contentnode.core.keepalive import ConnectionPool
from contentnode.core.origin import OriginError
from contentnode.core.paths import CONTROL, MAX_PATH_BYTES, PathError, decode_path
from contentnode.core.rate_table import RateTable
from contentnode.core.settings import effective
from contentnode.core.shared_cache import KEEP_FOR, SharedCache
from contentnode.core.traffic import Traffic
from contentnode.services import origin_mode
from contentnode.services.jobs import Every

log = logging.getLogger("contentnode.content")

ORIGIN_TIMEOUT = 30.0        # a whole origin GET, headers to last byte
MAX_IMAGE_SOURCE = 64 << 20  # bytes of a source image read into memory for a transform
IMAGE_PIXELS_AT_ONCE = 24_000_000   # decoded pixels of the transforms running at once (~96 MB), per process
IMAGE_TRANSFORMS_AT_ONCE = 2        # transforms are CPU bound
IMAGE_SOURCES_AT_ONCE = 8           # sources held in memory, read or waiting for a transform slot
REMEMBERED_TARGETS = 4096    # resolved (host, path) targets kept per state document
RATE_TABLE = "ratelimit.table"   # in the data dir (core/rate_table.py)
FLUSH_SECONDS = 60           # the traffic series is saved (and the cache size followed) this often
_SLASHES = re.compile(r"//+")


class NotServed(Exception):
    """A visit the engine will not serve: the HTTP status and error code it stands for, the client's message."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


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
    edge: edge_rules.EdgeRule   # the rule's edge members as checked, made with the rule index (Match.edge)
    ttl: int = field(init=False)
    cache_key: tuple = field(init=False)
    compress: bool = field(init=False)   # compressible objects go compressed to clients that accept it
    # coding ("" for identity) -> (cache entry, its hit headers without Age): a remembered target
    # serves many hits of one entry per representation
    hit_headers: dict = field(init=False, default_factory=dict)
    # decided once per target, so a plain hit skips the stages that do nothing for it:
    edge_checked: bool = field(init=False, default=True)   # the domain or rule has access, referers or a rate limit
    dressed: bool = field(init=False)   # the rule adds headers or CORS fields to its answers

    def __post_init__(self):
        self.dressed = bool(self.rule["headers"] or self.rule["cors"])
        self.ttl = self.rule["cache_ttl"]
        self.cache_key = (self.host, self.path, self.variant.key() if self.variant else "")
        # only what is cached is compressed (once); image variants are images
        self.compress = self.rule["compress"] and self.ttl > 0 and self.variant is None


class Origins:
    """One origin per bucket, made once and again only when the bucket's record or the outbound rules
    change, so an S3 bucket's kept-alive connections (core/keepalive.py) serve one miss after another."""

    def __init__(self, folder_roots, outbound, clock, http_pools=None, own_ports=frozenset) -> None:
        self._folder_roots, self._outbound, self._clock = folder_roots, outbound, clock
        self._http_pools, self._own_ports = http_pools, own_ports   # http buckets: the App's pools, a loop refused
        # bucket id -> (record as made from, outbound policy, origin, pool, the stored record itself)
        self._made: dict = {}
        self._lock = threading.Lock()

    def get(self, bucket_id, record, live):
        """The origin of `record` (bucket `bucket_id`); `live` holds the ids still stored, the others go.
        The stored record is never changed in place (store.py): the same object needs no comparison."""
        policy = (self._outbound(), self._own_ports())
        made = self._made.get(bucket_id)
        if made is not None and (made[4] is record or made[0] == record) and made[1] == policy:
            return made[2]
        with self._lock:
            made = self._made.get(bucket_id)
            if made is not None and made[0] == record and made[1] == policy:
                return made[2]
            pool = ConnectionPool()
            origin = buckets.origin_for(record, self._folder_roots, policy[0], self._clock.now, ORIGIN_TIMEOUT, pool,
                                        self._http_pools, policy[1])
            gone = [self._made.pop(bid) for bid in list(self._made) if bid == bucket_id or bid not in live]
            self._made[bucket_id] = (copy.deepcopy(record), policy, origin, pool, record)
        for old in gone:
            old[3].close()
        return origin

    def close(self) -> None:
        with self._lock:
            made, self._made = self._made, {}
        for entry in made.values():
            entry[3].close()


class Delivery:
    """The content path's long-lived parts: cache, traffic series, rule index, image slots, origins."""

    def __init__(self, store, clock, data_dir: str, processes: int, worker_slot: int | None, folder_roots,
                 outbound, origin_pools=None, own_ports=frozenset):
        self.store, self.clock = store, clock
        self.cache = Cache(f"{data_dir}/cache", effective(store.data)["cache_max_bytes"], clock.now,
                           processes=processes, worker_slot=worker_slot)
        self.traffic = Traffic(f"{data_dir}/traffic.json", clock.now)
        # the rules' rate limits, shared by every public process: the daemon makes it, its workers map it
        self.rate_table = RateTable(f"{data_dir}/{RATE_TABLE}", fresh=worker_slot is None, shared=processes > 1)
        self.origins = Origins(folder_roots, outbound, clock, origin_pools, own_ports)
        self.shared = SharedCache(self.cache)   # rules in cache_mode "origin" (services/origin_mode.py)
        self.image_budget = images.Budget(IMAGE_PIXELS_AT_ONCE, IMAGE_TRANSFORMS_AT_ONCE)
        # sources read into memory for transforms, waiting ones included: at most two of the largest
        self.image_sources = images.Budget(2 * MAX_IMAGE_SOURCE, IMAGE_SOURCES_AT_ONCE)
        # sources held in memory by compressions running at once (each held once, by its variant's fill)
        self.compressions = images.Budget(encodings.AT_ONCE * encodings.MAX_BYTES, encodings.AT_ONCE)
        self._index = (None, rules.RuleIndex([]))
        self._index_lock = threading.Lock()
        self._targets: tuple = (None, {})   # (state document, {(host, path): Target}), see remembered()

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

    def origin(self, target: "Target"):
        """The origin (core/origin.py) of the target's bucket, with the content path's timeout."""
        return self.origins.get(target.rule.get("bucket"), target.bucket, self.store.data.get("buckets", {}))

    def sync_settings(self):
        """Follow a changed cache size setting (run by the flush job, and at once by PUT /api/settings)."""
        self.cache.set_limit(effective(self.store.data)["cache_max_bytes"])

    def flush(self) -> None:
        """Save the traffic series and follow the cache size setting."""
        self.traffic.save()
        self.sync_settings()

    def close(self) -> None:
        """At a clean stop: the traffic series saved, the cache and the origins' connections closed."""
        self.traffic.save()
        self.cache.close()
        self.origins.close()
        self.rate_table.close()

    def flush_job(self) -> Every:
        """The job that flushes every FLUSH_SECONDS and closes the engine when it stops."""
        return Every("traffic-flush", FLUSH_SECONDS, self.flush, at_stop=self.close)


# ---------------------------------------------------------------- resolving


def content_path(raw_path: str, path: str) -> str:
    """The canonical decoded path, or a 400 NotServed for what only content refuses: encoded slashes,
    backslashes and dot segments (a key is never reached by traversal).

    `path` is `raw_path` decoded and already free of hostile bytes (public/visit.py).
    Repeated slashes collapse, as in rule paths and bucket keys: `/f.txt`,
    `//f.txt` and `///f.txt` are one object, one cache entry, one purge.
    """
    if "\\" in path or "%" in raw_path and "%2f" in raw_path.lower():
        raise NotServed(400, "invalid", "encoded slashes and backslashes are not allowed in paths")
    if rules.has_dot_segment(path):
        raise NotServed(400, "invalid", '"." and ".." segments are not allowed in paths')
    return canonical_slashes(path)


def canonical_slashes(path: str) -> str:
    return _SLASHES.sub("/", path) if "//" in path else path


def clean_path(raw_path: str) -> str:
    """The decoded path of a URL given to the admin API (purge, warm, probe), or a 400 NotServed."""
    if len(raw_path) > MAX_PATH_BYTES or not raw_path.startswith("/"):
        raise NotServed(400, "invalid", "the path is not acceptable")
    if CONTROL.search(raw_path):
        raise NotServed(400, "invalid", "control characters (NUL included) are not allowed in paths")
    try:
        return content_path(raw_path, decode_path(raw_path))
    except PathError as exc:
        raise NotServed(400, "invalid", str(exc)) from None


def redirect_location(domain: dict | None, target: str) -> tuple[int, str] | None:
    """(status, Location) a domain's redirect answers for a request target, or None without one.

    The public redirect stage and POST /api/diagnose both ask this, so they never disagree.
    """
    redirect = domain and domain["redirect"]
    if not redirect:
        return None
    to = redirect["to"]
    return redirect["code"], (to.rstrip("/") + target if redirect["keep_path"] else to)


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
    """The domain, rule, bucket, key and image variant a request maps to, or NotServed.

    The public content stage, warm, probe and diagnose all run this one function;
    given a `trace` (core.steps.Steps) it records each decision as a step in
    the order a visit meets them (domain, rule, signature, image), so the
    diagnosis shows what a visitor gets, never a re-telling of it.
    """
    doc = delivery.store.data
    if trace is None:
        target = delivery.remembered(doc, host, path)
        if target is not None:
            return target
        trace = _NoTrace
    started = time.monotonic()
    domain = doc.get("domains", {}).get(host)
    if domain is None:
        trace.add("domain", False, f"{host} is not a domain of this node (visitors get 404)", started)
        raise NotServed(404, "not_found", "this host is not served here")
    status = domain["status"]
    trace.add("domain", status == "verified", f"{host} is configured, status {status}"
              + ("" if status == "verified" else " (served, but its check has not passed)"), started)
    started = time.monotonic()
    match = delivery.rule_index(doc).match(host, path)
    if match is None:
        trace.add("rule", False, "no rule covers this path (visitors get 404)", started)
        raise NotServed(404, "not_found", "nothing is served at this path")
    rule = match.rule
    enabled = rule["enabled"]
    trace.add("rule", enabled, f"rule {rule['id']} ({rule['path']}) maps it to key {match.key!r}"
              + ("" if enabled else ", but it is disabled (visitors get 404)"), started, rule_id=rule["id"],
              key=match.key)
    if not enabled:
        raise NotServed(404, "not_found", "nothing is served at this path")
    started = time.monotonic()
    params = dict(reversed(query))  # first value of each name wins
    if not rule["signed"]:
        trace.add("signature", True, "this rule needs no signature", started)
    elif not check_signature:
        trace.add("signature", True, "this rule needs a signed link (not checked here)", started)
    else:
        ok, reason = signing.verify(keyring(doc), host, path, params, delivery.clock.now(), client_ip)
        code, message = SIGNATURE_MESSAGES.get(reason, ("signature_invalid", "the link is not valid"))
        trace.add("signature", ok, "the link's signature is valid" if ok else message, started)
        if not ok:
            raise NotServed(403, code, message)
    variant = _variant(rule, params, trace) if rule["images"] else None
    bucket = doc.get("buckets", {}).get(rule["bucket"])
    target = Target(host, path, rule["id"], rule, bucket, match.key, variant, match.edge)
    target.edge_checked = bool(domain["access"] or rule["access"] or rule["referers"] or rule["rate_limit"])
    if not rule["signed"] and not rule["images"]:
        delivery.remember(doc, target)   # the query, the client and the time change nothing here
    return target


def _variant(rule, params: dict, trace) -> images.Variant | None:
    """The image variant the query asks for on an images rule (None: the original), or NotServed."""
    started = time.monotonic()
    try:
        variant = images.parse({k: v for k, v in params.items() if k not in signing.LINK_PARAMS})
    except images.ImageError as exc:
        trace.add("image", False, str(exc), started)
        raise NotServed(400, "invalid", str(exc), exc.field) from None
    if variant is not None and not images.available():
        message = f"images on the fly need the {images.EXTRA} extra on this node"
        trace.add("image", False, message, started)
        raise NotServed(503, "images_unavailable", message)
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


def _origin_fetch(delivery, target: Target):
    def fetch():
        if target.bucket is None:
            raise OriginError("no_such_bucket", "the rule's bucket is gone")
        return delivery.origin(target).open(target.key, client_host=target.host)   # host_header "client"
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


def _shared_variant_fetch(delivery, target: Target):
    """An image variant of a rule in cache_mode "origin": its source through the shared cache, the
    variant kept only while that source is fresh (never when it was not stored)."""
    def fetch():
        served, fresh_for = origin_mode.source(delivery, target)
        result = served.result
        if served.status != 200 or (result.size or 0) > MAX_IMAGE_SOURCE:
            result.close()
            if served.status == 200:
                raise images.ImageError("the source image is too large to transform")
            return OriginAnswer({404: 404, 410: 404, 401: 403, 403: 403}.get(served.status, 502))
        data = result.read_all()
        if len(data) > MAX_IMAGE_SOURCE:
            raise images.ImageError("the source image is too large to transform")
        with delivery.image_sources.hold(len(data)):
            out, ctype = images.transform(data, target.variant, delivery.image_budget)
        tag = hashlib.sha256(f"{served.field('etag')}|{target.variant.key()}".encode()).hexdigest()
        meta = {"content_type": ctype, "etag": f'"{tag[:32]}"', "last_modified": served.field("last-modified")}
        return OriginAnswer(200, meta, len(out), [out], expires_at=delivery.cache.clock() + fresh_for,
                            shared=fresh_for > 0)
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
    identity); origin failures become a 404, 400, 502 or 504 NotServed."""
    fetcher = _origin_fetch(delivery, target)
    ttl = target.ttl
    if origin_mode.shares_source(target):
        fetcher, ttl = _shared_variant_fetch(delivery, target), KEEP_FOR   # the source's freshness ends it
    elif target.variant is not None:
        fetcher = _variant_fetch(delivery, target, fetcher)
    result = _cached(delivery, target.cache_key, fetcher, ttl)
    if result.status == 404:
        raise NotServed(404, "not_found", "no such object")
    if result.status == 403:
        raise NotServed(403, "forbidden", "this object may not be read")
    if result.status != 200:
        raise NotServed(502, "bad_gateway", "the origin could not serve this object")
    if (coding is None or not target.compress or isinstance(result, StreamedResult)
            or not encodings.compressible(result.meta, result.size)):
        return result   # (a streamed object is not cached: nothing is made from it)
    try:
        # the coding fill joins this request's identity fill (if any) before this one lets it go
        encoded = _cached(delivery, target.cache_key + (coding,),
                          _encoded_fetch(delivery, target, coding, fetcher), target.ttl)
    except NotServed:
        return result
    if encoded.status != 200:
        encoded.close()
        return result
    result.close()
    return encoded


def held_in_memory(delivery, target: Target, coding: str | None, now: float, count: bool) -> list | None:
    """What fetch() would answer from memory for `target` in `coding` at `now`: the cache entries (with
    their bodies) it would count as hits, the answering one last, counted already with `count` (for a
    caller that answers whatever is found), else only looked at; None when fetch() would read a file,
    fill or compress. The public listeners' loop thread answers only such hits."""
    variant_key = target.cache_key + (coding,) if coding is not None and target.compress else None
    return delivery.cache.held_hits(target.cache_key, now, variant_key, encodings.compressible, count)


def fetch_held(delivery, held: list, now: float, counted: bool):
    """The Result fetch() gives for what held_in_memory() found, its hits counted (at `now`) as fetch()
    counts them unless held_in_memory() `counted` them."""
    cache = delivery.cache
    results = ([cache.held_result(entry, body) for entry, body in held] if counted
               else [cache.memory_hit(entry, body, now) for entry, body in held])
    for passed in results[:-1]:
        passed.close()
    return results[-1]


def _cached(delivery, key: tuple, fetcher, ttl: int):
    try:
        return delivery.cache.get(key, fetcher, ttl)
    except images.ImageError as exc:
        raise NotServed(400, "invalid", f"cannot transform this object: {exc}") from None
    except (OriginError, FillStalled, FillTruncated, OSError) as exc:
        raise origin_error(exc) from None


def origin_error(exc) -> NotServed:
    """502 or 504 for an origin failure; the cause is logged, never sent."""
    log.warning("origin failure: %s", exc)
    timed_out = isinstance(exc, FillStalled) or getattr(exc, "code", None) == "timeout"
    if timed_out:
        return NotServed(504, "gateway_timeout", "the origin did not answer in time")
    return NotServed(502, "bad_gateway", "the origin could not be reached")
