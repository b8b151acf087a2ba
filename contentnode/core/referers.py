"""A rule's `referers` member (hotlink protection): which pages may embed or link its content.

A request's Referer header names the page that asked for it; the rule lists
the hosts allowed to (exact names, or "*.example.com" for every name below
example.com) and says whether a request without a Referer gets in. The
decision knows nothing of HTTP; public/edge_guard.py refuses with 403
forbidden_referer before any cache or origin work.
"""

from functools import lru_cache
from urllib.parse import urlsplit

from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.core.shapes import BOOLEAN, STRING, array, nullable, obj

MAX_PATTERNS = 100
MAX_REFERER = 2048     # longer Referer headers are not parsed (and so refused)

SHAPE = nullable(obj({
    "allow": array(STRING, MAX_PATTERNS),
    "empty": BOOLEAN,
}, description='hosts whose pages may fetch this content ("example.com", "*.example.com" for the names below it; '
               "the domain itself always may), and whether a request without a Referer may (default true)"))


def referers_rule(value):
    """The stored form of `referers`: null, or the patterns normalised (punycode, lower case) and `empty`."""
    if value is None:
        return None
    allow = []
    for item in value.get("allow", []):
        wild = item.startswith("*.")
        try:
            host = normalize_host(item[2:] if wild else item)
        except HostnameError as exc:
            raise FieldError(f"referers.allow: {item[:100]!r}: {exc}", "referers.allow") from None
        pattern = f"*.{host}" if wild else host
        if pattern not in allow:
            allow.append(pattern)
    return {"allow": allow, "empty": value.get("empty", True)}


@lru_cache(maxsize=256)
def _patterns(allow: tuple) -> tuple[frozenset, tuple]:
    """(exact names, suffixes ".example.com") of a stored list, made once per list."""
    return (frozenset(p for p in allow if not p.startswith("*.")),
            tuple(p[1:] for p in allow if p.startswith("*.")))


def referer_allowed(referers: dict | None, referer: str | None, own_host: str) -> bool:
    """Whether a request with this Referer header (None: none) may fetch from `own_host` under `referers`."""
    if not referers:
        return True
    if referer is None or not referer.strip():
        return referers["empty"]
    if len(referer) > MAX_REFERER:
        return False
    try:
        host = (urlsplit(referer.strip()).hostname or "").rstrip(".")
    except ValueError:
        return False
    if not host:
        return False
    if host == own_host:
        return True
    exact, suffixes = _patterns(tuple(referers["allow"]))
    return host in exact or host.endswith(suffixes)
