"""A rule's cache settings: how it caches, which query it keeps, which methods it passes on.

These members sit on every rule (docs/API.md, "POST /api/rules"): `cache_mode`,
`query`, `methods`, `max_body`, `stale_while_revalidate` and
`stale_if_error`. Their defaults differ by bucket type so that no rule
stored before they existed changes meaning: S3 and folder rules keep a fixed
TTL, ignore the query and answer GET/HEAD only, while a rule in front of an
http origin is a shared cache that keeps the query and forwards the rest.
Here are their record rules (value to store or FieldError) and what the
delivery path derives from them.
"""

import functools
from collections.abc import Iterable

from contentnode.core.fields import FieldError
from contentnode.core.http_cache import StaleDefaults

CACHE_MODES = ("override", "origin")
QUERY_POLICIES = ("ignore", "include")
METHOD_POLICIES = ("read", "all")
DEFAULT_MAX_BODY = 10 << 20
MAX_MAX_BODY = 1 << 30
MAX_STALE = 31_536_000        # one year, as cache_ttl
MAX_QUERY_NAMES = 64
MAX_QUERY_NAME = 256
READ_METHODS = frozenset({"GET", "HEAD"})
# the defaults of a rule on an S3 or folder bucket (and of every rule stored before these members)
DEFAULTS = {"cache_mode": "override", "query": "ignore", "methods": "read", "max_body": DEFAULT_MAX_BODY,
            "stale_while_revalidate": 0, "stale_if_error": 0}
# what a rule created on an http bucket gets instead, unless the create names the member
HTTP_DEFAULTS = {"cache_mode": "origin", "query": "include", "methods": "all"}


def query_policy(value):
    """"ignore", "include" or {"only": [names]} (names unique, sorted, non-empty), else FieldError."""
    if isinstance(value, str):
        if value not in QUERY_POLICIES:
            raise FieldError('query must be "ignore", "include" or {"only": [names]}', "query")
        return value
    if not isinstance(value, dict) or set(value) != {"only"} or not isinstance(value["only"], list):
        raise FieldError('query must be "ignore", "include" or {"only": [names]}', "query")
    names = value["only"]
    if not names or len(names) > MAX_QUERY_NAMES:
        raise FieldError(f"query.only must hold 1 to {MAX_QUERY_NAMES} parameter names", "query")
    for name in names:
        if not isinstance(name, str) or not name or len(name) > MAX_QUERY_NAME \
                or any(ord(c) < 33 or c in "&=#\x7f" for c in name):
            raise FieldError("query.only holds a name that is not a query parameter name", "query")
    return {"only": sorted(set(names))}


def defaults_for(bucket_type: str | None) -> dict:
    """The cache members a new rule on a bucket of this type gets when the create leaves them out."""
    return dict(DEFAULTS, **HTTP_DEFAULTS) if bucket_type == "http" else dict(DEFAULTS)


def kept_query(policy, pairs: Iterable[tuple[str, str]], dropped: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The query parameters the cache key and the origin request keep, in the client's order.

    `dropped` names parameters the node itself reads (a signed link's) that
    never reach the origin.
    """
    if policy == "ignore":
        return []
    skip = set(dropped)
    only = set(policy["only"]) if isinstance(policy, dict) else None
    return [(name, value) for name, value in pairs
            if name not in skip and (only is None or name in only)]


def stale_defaults(rule: dict) -> StaleDefaults:
    """The rule's stale windows, used only when an origin's answer names none of its own."""
    return _stale_defaults(rule["stale_while_revalidate"], rule["stale_if_error"])


@functools.lru_cache(maxsize=256)
def _stale_defaults(while_revalidate: int, if_error: int) -> StaleDefaults:
    """One immutable StaleDefaults per pair of windows, shared by every request on rules with it
    (a hit makes none)."""
    return StaleDefaults(while_revalidate, if_error)

