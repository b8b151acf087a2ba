"""Rules on an http or S3 bucket in cache_mode "origin" (the shared cache for GET and HEAD), and
rules on an http bucket with methods "all" (every other method forwarded, uncached).

The content stage hands over the visit (method, fields, query, who asked) as
a Visitor; this module keeps the query the rule's `query` policy keeps (a
signed link's parameters never reach the origin), builds the fields the
origin gets (core/forwarding.py) and runs the request through the shared
cache (core/shared_cache.py). The answer is an Exchange: the origin's status,
the fields to send, the body as a cache Result. Other methods go to the
origin with their bodies streamed as they arrive (`max_body` bytes at most);
a successful unsafe one purges what is stored for its URL and for the
Location/Content-Location URLs of its answer on the same host (RFC 9111 §4.4).
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from contentnode.core import buckets, cache_policy
from contentnode.core import http_cache as hc
from contentnode.core.forwarding import request_fields
from contentnode.core.shared_cache import CLIENT_CONDITIONALS, Exchange, Request, verdict
from contentnode.core.signing import LINK_PARAMS
from contentnode.services import origin_encoding


@dataclass(frozen=True)
class Visitor:
    """One request as the origin mode needs it: method, fields as sent (pairs), the decoded query
    pairs, the peer's address and whether it is a trusted proxy, the scheme and Host it came on."""

    method: str
    fields: list
    query: list
    peer_ip: str
    peer_trusted: bool
    proto: str
    host: str


# the bucket types the shared cache reads (a folder has no caching metadata: its rules keep the fixed TTL)
SHARED_KINDS = frozenset({"http", "s3"})


def applies(target) -> bool:
    """Whether the target is served by the shared cache: an http or S3 bucket's rule in cache_mode
    "origin" (an image variant is made from the original through the fixed-TTL cache)."""
    return (target.rule["cache_mode"] == "origin" and target.variant is None and target.bucket is not None
            and buckets.kind(target.bucket) in SHARED_KINDS)


def kept_query(target, visitor: Visitor) -> str:
    """The query string the cache key and the origin request keep (the rule's `query` policy)."""
    return _kept(target.rule["query"], visitor.query)


def _kept(policy, query: list) -> str:
    if not query or policy == "ignore":   # nothing kept: no pairs to filter and encode
        return ""
    return urlencode(cache_policy.kept_query(policy, query, LINK_PARAMS))


def request(target, fields: Mapping[str, str], query: str) -> Request:
    """The request as the shared cache sees it; `fields` by lower-case name, one value each. Its
    key: host and path first (a URL purge matches them), then the query."""
    return Request((target.host, target.path, "", "?" + query), fields, target.rule["cache_ttl"],
                   cache_policy.stale_defaults(target.rule))


def exchange(delivery, target, visitor: Visitor, on_interim: Callable[[int, list], None] | None = None) -> Exchange:
    """A GET or HEAD through the shared cache (OriginError, GatewayTimeout as the cache raises
    them), compressed when it may be and the client accepts it. `on_interim(status, fields)` gets
    the interim answers of the origin requests made for it as they come (none for a hit or a
    request that joined another's fill; a revalidation in the background may call it from its
    own thread)."""
    asked, served = _served(delivery, target, visitor, on_interim)
    return origin_encoding.encoded(delivery, target, served, asked.fields.get("accept-encoding"))


def held(delivery, target, fields: dict, query: list, now: float | None = None) -> tuple[Exchange, list] | None:
    """What exchange() answers at `now` from memory without a wait (a stored answer and, compressed,
    its variant held in memory): (the exchange, the cache entries to count as hits once it is
    answered, with `count_held`), or None when it would read a file or ask the origin. `fields`
    are the request's by lower-case name (hc.fields of its lines), `query` its decoded pairs."""
    found = delivery.shared.held(request(target, fields, _kept(target.rule["query"], query)), now)
    if found is None:
        return None
    return origin_encoding.held(delivery, target, found, fields.get("accept-encoding"))


def count_held(delivery, entries: list) -> None:
    """Count the hits of an answer held() found, as exchange() counts them."""
    for entry in entries:
        delivery.cache.count_memory_hit(entry)


def _served(delivery, target, visitor: Visitor, on_interim=None) -> tuple[Request, Exchange]:
    origin = delivery.origin(target)
    query = kept_query(target, visitor)
    sent = visitor_fields(visitor, drop=CLIENT_CONDITIONALS)

    def forward(extra: dict):
        return origin.forward("GET", target.key, query, sent + list(extra.items()), client_host=visitor.host,
                              on_interim=on_interim)
    asked = request(target, hc.fields(visitor.fields), query)
    return asked, delivery.shared.serve(asked, forward)


def shares_source(target) -> bool:
    """Whether an image variant's source comes through the shared cache (its rule is in cache_mode
    "origin" on an http or S3 bucket)."""
    return (target.variant is not None and target.rule["cache_mode"] == "origin" and target.bucket is not None
            and buckets.kind(target.bucket) in SHARED_KINDS)


def source(delivery, target) -> tuple[Exchange, float]:
    """An image variant's source through the shared cache, asked as the URL without a query and
    without client fields, and for how many seconds it stays fresh (0 when it was not stored:
    a variant made from it is not kept either)."""
    visitor = Visitor("GET", [("Host", target.host)], [], "127.0.0.1", False, "http", target.host)
    _asked, served = _served(delivery, target, visitor)
    meta = served.result.meta
    if served.status != 200 or not (served.hit or meta.get("stored")) or "lifetime" not in meta:
        return served, 0.0
    age = hc.current_age(dict(meta["fields"]), meta["request_time"], meta["response_time"], delivery.shared.clock())
    return served, max(0.0, meta["lifetime"] - age)


def visitor_fields(visitor: Visitor, drop=()) -> list:
    return request_fields(visitor.fields, visitor.peer_ip, visitor.peer_trusted, visitor.proto, visitor.host, drop)


class TooLarge(Exception):
    """A forwarded body longer than the rule's max_body (the answer is 413)."""


def forwards(target) -> bool:
    """Whether the target's rule forwards methods other than GET and HEAD to its (http) origin."""
    return target.rule["methods"] == "all" and target.bucket is not None and buckets.kind(target.bucket) == "http"


def _capped(chunks, limit: int):
    total = 0
    for chunk in chunks:
        total += len(chunk)
        if total > limit:
            raise TooLarge()
        yield chunk


def forward(delivery, target, visitor: Visitor, body, length: int | None,
            on_interim: Callable[[int, list], None] | None = None):
    """Pass one request of another method on (its body streamed from `body`, the chunks as they
    arrive) and return the origin's answer with its body unread, its interim answers handed to
    `on_interim` as they come; TooLarge past max_body (an announced length is refused before
    anything is sent). Purges what the answer invalidates."""
    limit = target.rule["max_body"]
    if length is not None and length > limit:
        raise TooLarge()
    query = kept_query(target, visitor)
    answer = delivery.origin(target).forward(visitor.method, target.key, query, visitor_fields(visitor),
                                             body=_capped(body, limit), length=length, client_host=visitor.host,
                                             on_interim=on_interim)
    base = f"{visitor.proto}://{visitor.host}{target.path}"
    stale = hc.invalidation_targets(visitor.method, answer.status, base, hc.fields(answer.headers))
    if stale:
        delivery.cache.purge_urls({(target.host, urlsplit(uri).path or "/") for uri in stale})
    return answer


def _bare_request(target, query: list) -> Request:
    """The URL asked without request fields (its first stored variant)."""
    return request(target, {}, _kept(target.rule["query"], query))


def cache_state(delivery, target, query: list) -> dict:
    """What diagnose shows of the shared cache for a URL (no request fields)."""
    return delivery.shared.state(_bare_request(target, query))


def probe_state(delivery, target, query: list, status: int | None, fields: list | None) -> dict:
    """What probe shows: the stored state, `cache_status` (the Cache-Status a GET without request
    fields gets now) and `decision` (whether the origin's answer to the probe's HEAD, `status`
    and `fields`, would be stored and why not, with its freshness; null without an answer)."""
    req = _bare_request(target, query)
    state = dict(delivery.shared.state(req), cache_status=delivery.shared.predict(req), decision=None)
    if status is not None and fields is not None:
        why, lifetime, _keep = verdict(req, status, hc.fields(fields), delivery.shared.clock())
        state["decision"] = {"store": why is None, "why": why, "lifetime": int(lifetime.lifetime),
                             "freshness": lifetime.source}
    return state


def describe(state: dict) -> str:
    """The diagnose line of a shared-cache state."""
    if not state["cached"]:
        return "not stored: the next request asks the origin"
    left = state["expires_in"]
    fresh = f"fresh for {left} s more" if left > 0 else f"stale for {-left} s (revalidated on the next request)"
    validators = ", ".join(f"{name} {state[key]}" for name, key in (("ETag", "etag"), ("Last-Modified",
                                                                                        "last_modified"))
                           if state[key]) or "no validators"
    return (f"stored {state['age']} s ago (status {state['status']}, {state['size']} bytes), freshness "
            f"{state['lifetime']} s from {state['freshness']}, {fresh}; {validators}")
