"""The rules of a shared HTTP cache (RFC 9111, RFC 5861, RFC 9211, RFC 9213) as pure functions.

A rule in cache_mode "origin" stores and reuses an origin's answers the way its
own caching fields say. Every decision that takes (see docs/API.md "Shared
cache") lives here with no I/O and no clock of its own, so each case of the
RFCs is a unit test: may an answer be stored, how long it stays fresh, its
current age, may a stale copy be served, the secondary key Vary names, which
fields a 304 refreshes, what an unsafe method invalidates, and the
Cache-Status field that reports the decision.

Field maps are dicts keyed by lower-case field name, each value the field's
lines joined with ", " (see `fields`). Times are seconds since the epoch.
"""

import calendar
import functools
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

CACHE_NAME = "contentnode"
DELTA_MAX = 2_147_483_648          # RFC 9111 §1.2.2: a delta-seconds too large to hold is this
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# RFC 9110 §15.1: heuristically cacheable status codes (206 left out: ranges are not stored)
HEURISTIC_STATUS = frozenset({200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501})
# the status codes whose semantics this cache implements (must-understand, RFC 9111 §5.2.2.3)
UNDERSTOOD_STATUS = HEURISTIC_STATUS | {302, 303, 307}
HEURISTIC_FRACTION = 0.1           # RFC 9111 §4.2.2: "some fraction" of the time since Last-Modified
# RFC 9110 §7.6.1 hop-by-hop fields, never stored or forwarded
HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
                        "proxy-connection", "proxy-authenticate", "proxy-authorization"})
# fields a 304 must not replace (RFC 9111 §3.2: Content-Length; and what the cache computes itself)
_NOT_REFRESHED = frozenset({"content-length", "age", "cache-status", "x-cache", "via"})
_DIRECTIVE = re.compile(r'\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^,\s]*))?\s*(?:,|$)')
_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                        "nov", "dec"), start=1)}


def fields(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Field lines as one map: lower-case names, repeated lines joined with ", " (RFC 9110 §5.3)."""
    out: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def directives(value: str | None) -> dict[str, str | None]:
    """A Cache-Control style list as {name: argument or None}; the first of a repeated name counts.

    Names are case-insensitive (RFC 9111 §5.2); quoted arguments are unquoted.
    Text that is not a directive list ends the parse there.
    """
    out: dict[str, str | None] = {}
    if not value:
        return out
    pos = 0
    while pos < len(value):
        if value[pos] in ", \t":
            pos += 1
            continue
        found = _DIRECTIVE.match(value, pos)
        if not found or found.end() == pos:
            break
        name, arg = found.group(1).lower(), found.group(2)
        if arg is not None and arg.startswith('"'):
            arg = re.sub(r"\\(.)", r"\1", arg[1:-1])
        out.setdefault(name, arg)
        pos = found.end()
    return out


def delta_seconds(arg: str | None) -> int | None:
    """A delta-seconds argument (RFC 9111 §1.2.2), or None when it is missing or not digits."""
    if arg is None or not arg.isdigit() or not arg.isascii():
        return None
    return min(int(arg), DELTA_MAX)


_WEEKDAY = r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_CLOCK = r"(\d\d):(\d\d):(\d\d)"


@functools.cache
def _date_forms() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """IMF-fixdate, RFC 850 and asctime, compiled at the first date read rather than at every start
    (case-insensitive alternations are the slowest patterns to compile: ~5 ms of CPU per process)."""
    return (re.compile(rf"{_WEEKDAY}, (\d\d) {_MONTH} (\d{{4}}) {_CLOCK} GMT", re.IGNORECASE),
            re.compile(rf"(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d\d)-{_MONTH}-(\d\d) "
                       rf"{_CLOCK} GMT", re.IGNORECASE),
            re.compile(rf"{_WEEKDAY} {_MONTH} ([ \d]\d) {_CLOCK} (\d{{4}})", re.IGNORECASE))


def http_date(value: str | None) -> float | None:
    """An HTTP-date in exactly one of its three forms (IMF-fixdate, obsolete RFC 850, asctime:
    RFC 9110 §5.6.7), or None: a date written any other way is invalid (an invalid Expires
    means already expired). Names are read in any case, as most caches do."""
    if not value:
        return None
    return _parsed_date(value)


@functools.lru_cache(maxsize=256)
def _parsed_date(value: str) -> float | None:
    """http_date's parse, remembered for the last 256 values: a miss reads its answer's Date and
    Last-Modified two or three times, and one origin sends the same ones for a second or more."""
    value = value.strip()
    imf_fixdate, rfc850, asctime = _date_forms()
    if found := imf_fixdate.fullmatch(value):
        _, day, month, year, hour, minute, second = found.groups()
    elif found := rfc850.fullmatch(value):
        _, day, month, short, hour, minute, second = found.groups()
        year = str(int(short) + (1900 if int(short) >= 70 else 2000))
    elif found := asctime.fullmatch(value):
        _, month, day, hour, minute, second, year = found.groups()
    else:
        return None
    stamp = (int(year), _MONTHS[month.lower()], int(day), int(hour), int(minute), int(second))
    if not (1 <= stamp[2] <= 31 and stamp[3] < 24 and stamp[4] < 60 and stamp[5] < 61):
        return None
    return float(calendar.timegm(stamp + (0, 0, 0)))


def format_date(when: float) -> str:
    """`when` as an IMF-fixdate."""
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(when))


_SF_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_SF_ITEM = re.compile(r'-?\d{1,15}(\.\d{1,3})?|"(?:[^"\\]|\\.)*"|[A-Za-z*][!#$%&\'*+.^_`|~0-9A-Za-z:/-]*|\?[01]')
_NUMERIC = frozenset({"max-age", "s-maxage", "stale-while-revalidate", "stale-if-error"})


def targeted_directives(value: str | None) -> dict[str, str | None]:
    """CDN-Cache-Control (RFC 9213 §2.1) read as the Structured Field Dictionary it is; {} when it
    is not one (the field is then ignored): keys lower case, the time directives integers."""
    out: dict[str, str | None] = {}
    for member in (value or "").split(","):
        key, eq, item = member.strip().partition("=")
        if not _SF_KEY.fullmatch(key) or eq and not _SF_ITEM.fullmatch(item):
            return {}
        if key in _NUMERIC and not (eq and item.isdigit()):
            return {}
        out.setdefault(key, item if eq else None)
    return out


def response_directives(resp: Mapping[str, str]) -> dict[str, str | None]:
    """The directives this cache obeys: CDN-Cache-Control when it is a valid dictionary holding any
    (RFC 9213 §2), else Cache-Control."""
    targeted = targeted_directives(resp.get("cdn-cache-control"))
    return targeted if targeted else directives(resp.get("cache-control"))


def _named_fields(arg: str | None) -> frozenset[str]:
    return frozenset(n.strip().lower() for n in (arg or "").split(",") if n.strip())


@dataclass(frozen=True)
class Decision:
    ok: bool
    reason: str


def storable(method: str, status: int, req: Mapping[str, str], resp: Mapping[str, str],
             cc: Mapping[str, str | None] | None = None) -> Decision:
    """May a shared cache store this answer (RFC 9111 §3, §3.5)? The reason names the deciding rule.
    `cc`: the answer's response_directives, when the caller has them already."""
    cc = response_directives(resp) if cc is None else cc
    if method not in ("GET", "HEAD"):
        return Decision(False, "method")
    if status < 200 or status in (206, 304):
        return Decision(False, "status")
    if "must-understand" in cc:
        if status not in UNDERSTOOD_STATUS:
            return Decision(False, "must-understand")
    elif "no-store" in cc:
        return Decision(False, "no-store")
    if "no-store" in directives(req.get("cache-control")):
        return Decision(False, "request no-store")
    if "private" in cc and cc["private"] is None:
        return Decision(False, "private")
    if "authorization" in req and not ({"must-revalidate", "public", "s-maxage"} & cc.keys()):
        return Decision(False, "authorization")
    if vary_names(resp) == ("*",):
        return Decision(False, "vary *")
    explicit = ({"public", "s-maxage", "max-age"} & cc.keys()) or "expires" in resp
    if not explicit and status not in HEURISTIC_STATUS:
        return Decision(False, "no freshness")
    return Decision(True, "stored")


def stored_fields(resp: Mapping[str, str]) -> dict[str, str]:
    """The fields kept with a stored answer: hop-by-hop fields, the fields Connection names and
    those a private="..." list names are dropped (RFC 9111 §3.1, §5.2.2.7)."""
    drop = HOP_BY_HOP | _named_fields(resp.get("connection")) | _named_fields(
        response_directives(resp).get("private"))
    return {name: value for name, value in resp.items() if name not in drop}


@dataclass(frozen=True)
class Freshness:
    lifetime: float
    source: str   # "s-maxage", "max-age", "expires", "heuristic", "none"


def freshness_lifetime(status: int, resp: Mapping[str, str], response_time: float, heuristic_cap: int,
                       cc: Mapping[str, str | None] | None = None) -> Freshness:
    """How long a stored answer stays fresh (RFC 9111 §4.2.1, §4.2.2).

    s-maxage, then max-age, then Expires minus Date (the time received when
    Date is missing; an invalid Expires is already stale). Without any, a
    heuristic of a tenth of the time since Last-Modified for heuristically
    cacheable statuses or a `public` answer, capped by `heuristic_cap` (the
    rule's cache_ttl); no Last-Modified gives no heuristic freshness. `cc`:
    the answer's response_directives, when the caller has them already.
    """
    cc = response_directives(resp) if cc is None else cc
    for name in ("s-maxage", "max-age"):
        if name in cc:
            value = delta_seconds(cc[name])
            return Freshness(float(value) if value is not None else 0.0, name)
    if "expires" in resp:
        expires = http_date(resp["expires"])
        if expires is None:
            return Freshness(0.0, "expires")
        date = http_date(resp.get("date"))
        return Freshness(max(0.0, expires - (date if date is not None else response_time)), "expires")
    if status in HEURISTIC_STATUS or "public" in cc:
        modified = http_date(resp.get("last-modified"))
        if modified is not None:
            date = http_date(resp.get("date"))
            since = (date if date is not None else response_time) - modified
            return Freshness(min(float(heuristic_cap), max(0.0, since * HEURISTIC_FRACTION)), "heuristic")
    return Freshness(0.0, "none")


def age_at_receipt(resp: Mapping[str, str], request_time: float, response_time: float) -> float:
    """The age of a stored answer when it was received (RFC 9111 §4.2.3's corrected_initial_age),
    from its Age and Date fields."""
    age_value = delta_seconds((resp.get("age") or "").split(",")[0].strip()) or 0
    date = http_date(resp.get("date"))
    apparent_age = max(0.0, response_time - date) if date is not None else 0.0
    corrected_age_value = age_value + max(0.0, response_time - request_time)
    return max(apparent_age, corrected_age_value)


def current_age(resp: Mapping[str, str], request_time: float, response_time: float, now: float) -> float:
    """The age of a stored answer at `now` (RFC 9111 §4.2.3): its age when received plus the time since."""
    return age_at_receipt(resp, request_time, response_time) + max(0.0, now - response_time)


@dataclass(frozen=True)
class StaleDefaults:
    """The rule's stale_while_revalidate and stale_if_error, used only when an answer has no such directive."""
    while_revalidate: int = 0
    if_error: int = 0


def _stale_window(cc: Mapping[str, str | None], name: str, default: int) -> int:
    if name in cc:
        return delta_seconds(cc[name]) or 0
    return default


def may_serve_stale(cc: Mapping[str, str | None]) -> bool:
    """False when the answer forbids serving it stale at all: must-revalidate, proxy-revalidate,
    or s-maxage, which implies proxy-revalidate in a shared cache (RFC 9111 §4.2.4, §5.2.2.10)."""
    return not ({"must-revalidate", "proxy-revalidate", "s-maxage"} & cc.keys())


@dataclass(slots=True)
class Reuse:
    """What to do with a stored answer for one request.

    action: "fresh" (serve it), "stale" (serve it stale: the request's
    max-stale allows), "stale-while-revalidate" (serve it and refresh in the
    background), "validate" (ask the origin with its validators, no body moves
    unless it changed), "gateway-timeout" (only-if-cached and nothing usable:
    answer 504). `ttl` is the freshness left (negative when stale); `fwd` the
    Cache-Status fwd value when the origin is asked.
    """
    action: str
    ttl: float
    fwd: str | None = None


def reuse(resp: Mapping[str, str], lifetime: float, age: float, req: Mapping[str, str],
          defaults: StaleDefaults, cc: Mapping[str, str | None] | None = None) -> Reuse:
    """May the stored answer (its fields, freshness lifetime and current age) answer this request?

    Follows RFC 9111 §4.2.4, §5.2.1 (the request's max-age, min-fresh,
    max-stale, no-cache, only-if-cached), §5.2.2.4 (no-cache) and RFC 5861
    stale-while-revalidate (the rule's default only when the answer has none).
    `cc` is the answer's response_directives when the caller already has them.
    """
    if cc is None:
        cc = response_directives(resp)
    asked = req.get("cache-control")
    rq = directives(asked) if asked else {}
    ttl = lifetime - age
    if "no-cache" in cc and cc["no-cache"] is None:
        return Reuse("validate", ttl, "stale")
    if "no-cache" in rq:
        return Reuse("validate", ttl, "request")
    fresh = ttl > 0
    # a request without directives (most hits) parses none
    limit = delta_seconds(rq.get("max-age")) if rq else None
    if limit is not None and age > limit:
        fresh = False
    need = delta_seconds(rq.get("min-fresh")) if rq else None
    if need is not None and ttl < need:
        fresh = False
    if fresh:
        return Reuse("fresh", ttl)
    stale_ok = ttl <= 0 and may_serve_stale(cc)
    if stale_ok and _request_allows_stale(rq, ttl):
        return Reuse("stale", ttl)
    if "only-if-cached" in rq:
        return Reuse("gateway-timeout", ttl)
    window = _stale_window(cc, "stale-while-revalidate", defaults.while_revalidate)
    if stale_ok and -ttl < window and limit is None and need is None:
        return Reuse("stale-while-revalidate", ttl)
    return Reuse("validate", ttl, "stale")


def unvalidated_fields(resp: Mapping[str, str]) -> dict[str, str]:
    """The stored fields a reuse without revalidation sends: those a qualified no-cache="..."
    names are left out (RFC 9111 §5.2.2.4)."""
    drop = _named_fields(response_directives(resp).get("no-cache"))
    return {name: value for name, value in resp.items() if name not in drop}


def _request_allows_stale(rq: Mapping[str, str | None], ttl: float) -> bool:
    """The request's max-stale (RFC 9111 §5.2.1.2): no argument accepts any staleness."""
    if "max-stale" not in rq:
        return False
    limit = delta_seconds(rq["max-stale"])
    return rq["max-stale"] is None or (limit is not None and -ttl <= limit)


def stale_if_error(resp: Mapping[str, str], ttl: float, req: Mapping[str, str], defaults: StaleDefaults) -> bool:
    """May a stale answer stand in for an origin that failed or answered 5xx (RFC 5861 §4)?

    The answer's (or else the request's, or else the rule's) stale-if-error
    window must cover how long it has been stale, and the answer must not
    forbid stale use (must-revalidate, proxy-revalidate, s-maxage, no-cache).
    """
    cc = response_directives(resp)
    if not may_serve_stale(cc) or "no-cache" in cc:
        return False
    rq = directives(req.get("cache-control"))
    window = _stale_window(cc, "stale-if-error", _stale_window(rq, "stale-if-error", defaults.if_error))
    return -ttl <= window


def vary_names(resp: Mapping[str, str]) -> tuple[str, ...]:
    """The request field names Vary lists, lower case, sorted; ("*",) when it holds "*"."""
    names = _named_fields(resp.get("vary"))
    if "*" in names:
        return ("*",)
    return tuple(sorted(names))


def _normalise(value: str | None) -> str | None:
    if value is None:
        return None
    return ",".join(part.strip() for part in value.split(",")).strip()


def secondary_key(names: tuple[str, ...], req: Mapping[str, str]) -> str | None:
    """The secondary cache key (RFC 9111 §4.1): the request's values of the fields Vary names,
    whitespace around commas removed; a missing field differs from an empty one. None for Vary: *."""
    if names == ("*",):
        return None
    parts = []
    for name in names:
        value = _normalise(req.get(name))
        parts.append(f"{name}:" + ("\x00" if value is None else value))
    return "\n".join(parts)


def refreshable(stored: Mapping[str, str], resp304: Mapping[str, str]) -> bool:
    """May this 304 freshen the stored answer (RFC 9111 §4.3.4)?

    A strong ETag in the 304 must equal the stored one, a weak one match it
    weakly; else a Last-Modified must equal the stored one. A 304 with no
    validator answers the validators this cache sent from the stored answer,
    so it freshens that answer.
    """
    etag = resp304.get("etag")
    if etag is not None:
        if etag.startswith("W/"):
            return _weak(stored.get("etag")) == _weak(etag)
        return stored.get("etag") == etag
    modified = resp304.get("last-modified")
    if modified is not None:
        return stored.get("last-modified") == modified
    return True


def _weak(tag: str | None) -> str | None:
    return tag[2:] if tag and tag.startswith("W/") else tag


def refreshed_fields(stored: Mapping[str, str], resp304: Mapping[str, str]) -> dict[str, str]:
    """The stored fields after a 304 (RFC 9111 §3.2): each field of the 304 replaces the stored
    one, except Content-Length, hop-by-hop fields and the fields this cache writes itself."""
    out = dict(stored)
    for name, value in stored_fields(resp304).items():
        if name not in _NOT_REFRESHED:
            out[name] = value
    return out


def conditional_fields(stored: Mapping[str, str]) -> dict[str, str]:
    """The validators to send when revalidating a stored answer (RFC 9111 §4.3.1)."""
    out = {}
    if "etag" in stored:
        out["if-none-match"] = stored["etag"]
    if "last-modified" in stored:
        out["if-modified-since"] = stored["last-modified"]
    return out


def invalidation_targets(method: str, status: int, target: str, resp: Mapping[str, str]) -> list[str]:
    """The URIs a successful unsafe method invalidates (RFC 9111 §4.4): the target URI and the
    Location and Content-Location URIs that fall on the same host; none for safe methods or
    non-2xx/3xx answers. `target` is absolute (scheme://host/path?query)."""
    if method in SAFE_METHODS or not 200 <= status < 400:
        return []
    out = [target]
    host = urlsplit(target).netloc.lower()
    for name in ("location", "content-location"):
        value = resp.get(name)
        if not value:
            continue
        uri = urljoin(target, value.strip())
        parts = urlsplit(uri)
        if parts.netloc.lower() == host and parts.scheme in ("http", "https") and uri not in out:
            out.append(uri)
    return out


def cache_status(hit: bool = False, fwd: str | None = None, fwd_status: int | None = None,
                 stored: bool = False, ttl: float | None = None, detail: str | None = None) -> str:
    """One Cache-Status member (RFC 9211) for this cache, e.g. `contentnode; fwd=uri-miss; stored`."""
    params = []
    if hit:
        params.append("hit")
    if fwd:
        params.append(f"fwd={fwd}")
    if fwd_status is not None:
        params.append(f"fwd-status={int(fwd_status)}")
    if stored:
        params.append("stored")
    if ttl is not None:
        params.append(f"ttl={int(ttl // 1)}")
    if detail:
        params.append('detail="' + detail.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "; ".join([CACHE_NAME] + params)
