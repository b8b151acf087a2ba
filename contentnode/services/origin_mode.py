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

from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from contentnode.core import buckets, cache_policy
from contentnode.core import http_cache as hc
from contentnode.core.forwarding import request_fields
from contentnode.core.shared_cache import CLIENT_CONDITIONALS, Exchange, Request
from contentnode.core.signing import LINK_PARAMS


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
    return urlencode(cache_policy.kept_query(target.rule["query"], visitor.query, LINK_PARAMS))


def cache_key(target, query: str) -> tuple:
    """The shared cache's key: host and path first (a URL purge matches them), then the query."""
    return (target.host, target.path, "", "?" + query)


def request(target, visitor: Visitor, query: str) -> Request:
    return Request(cache_key(target, query), hc.fields(visitor.fields), target.rule["cache_ttl"],
                   cache_policy.stale_defaults(target.rule))


def exchange(delivery, target, visitor: Visitor) -> Exchange:
    """A GET or HEAD through the shared cache (OriginError, GatewayTimeout as the cache raises them)."""
    origin = delivery.origin(target)
    query = kept_query(target, visitor)
    sent = visitor_fields(visitor, drop=CLIENT_CONDITIONALS)

    def forward(extra: dict):
        return origin.forward("GET", target.key, query, sent + list(extra.items()), client_host=visitor.host)
    return delivery.shared.serve(request(target, visitor, query), forward)


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


def forward(delivery, target, visitor: Visitor, body, length: int | None):
    """Pass one request of another method on (its body streamed from `body`, the chunks as they
    arrive) and return the origin's answer with its body unread; TooLarge past max_body (an
    announced length is refused before anything is sent). Purges what the answer invalidates."""
    limit = target.rule["max_body"]
    if length is not None and length > limit:
        raise TooLarge()
    query = kept_query(target, visitor)
    answer = delivery.origin(target).forward(visitor.method, target.key, query, visitor_fields(visitor),
                                             body=_capped(body, limit), length=length, client_host=visitor.host)
    base = f"{visitor.proto}://{visitor.host}{target.path}"
    stale = hc.invalidation_targets(visitor.method, answer.status, base, hc.fields(answer.headers))
    if stale:
        delivery.cache.purge_urls({(target.host, urlsplit(uri).path or "/") for uri in stale})
    return answer


def cache_state(delivery, target, query: list) -> dict:
    """What probe and diagnose show of the shared cache for a URL (no request fields: the URL's
    first stored variant)."""
    kept = urlencode(cache_policy.kept_query(target.rule["query"], query, LINK_PARAMS))
    return delivery.shared.state(Request(cache_key(target, kept), {}, target.rule["cache_ttl"],
                                         cache_policy.stale_defaults(target.rule)))


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
