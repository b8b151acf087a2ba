"""The edge members of a rule: who may fetch (`access`) and how often (`rate_limit`).

Both are checked on the public port before any cache or origin work
(public/edge_guard.py); here are their shapes, their stored forms and the
address decisions, which know nothing of HTTP. Addresses are the client's
after trusted_proxies (core/client_address.py); an IPv4 client seen on a
dual-stack listener as ::ffff:a.b.c.d is matched as its IPv4 address.
"""

import ipaddress
import re
from functools import lru_cache

from contentnode.core.fields import FieldError
from contentnode.core.settings import MAX_CIDRS, cidr_list
from contentnode.core.shapes import STRING, array, integer, nullable, obj, text

MAX_RATE = 100_000      # requests a second
MAX_BURST = 1_000_000
MAX_COUNTRIES = 250     # ISO 3166-1 has 249 codes
_COUNTRY = re.compile(r"[A-Za-z]{2}")

ACCESS_SHAPE = nullable(obj({
    "allow": array(STRING, MAX_CIDRS),
    "deny": array(STRING, MAX_CIDRS),
    "countries": nullable(obj({"allow": array(STRING, MAX_COUNTRIES), "deny": array(STRING, MAX_COUNTRIES)},
                              description='{"allow"|"deny": ["DE", ...]} (ISO 3166-1 alpha-2 codes): needs the '
                                          "node's country database (geoip_db)")),
}, description="who may fetch: client addresses allowed (none listed: all) and denied (deny wins)"))

RATE_LIMIT_SHAPE = nullable(obj({
    "rate": integer(1, MAX_RATE),
    "burst": integer(1, MAX_BURST),
}, required=("rate", "burst"), description="requests a second per client address (IPv6 by /64), "
                                           "and how many may come at once"))


MAX_HEADERS = 32
MAX_HEADER_VALUE = 1024
# names a rule never sets: framing, hop-by-hop, the node's validators and its own cache fields
NOT_SETTABLE = frozenset({
    "content-length", "transfer-encoding", "content-range", "content-encoding", "content-type",
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "upgrade", "etag", "last-modified", "date", "age", "accept-ranges", "vary", "x-cache", "cache-status",
    "set-cookie", "location", "retry-after", "www-authenticate"})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_VALUE = re.compile(r"[\x20-\x7e]*")

HEADERS_SHAPE = nullable({"type": "object",
                          "additionalProperties": text(MAX_HEADER_VALUE, min_length=0),
                          "description": "response headers to add or replace: {name: value}"})


def headers_rule(value):
    """The stored form of `headers`: null, or {name: value} with names that frame, hop or validate refused."""
    if value is None:
        return None
    if len(value) > MAX_HEADERS:
        raise FieldError(f"headers holds at most {MAX_HEADERS} names", "headers")
    seen = set()
    for name, text_value in value.items():
        lower = name.lower()
        if not _TOKEN.fullmatch(name):
            raise FieldError(f"{name[:64]!r} is not a header name", "headers")
        if lower in NOT_SETTABLE or lower.startswith("access-control-"):
            raise FieldError(f"headers may not set {name}: the node sets it (framing, hop-by-hop, validators, "
                             "caching and CORS fields are its own)", f"headers.{name}")
        if lower in seen:
            raise FieldError(f"headers names {name} twice", f"headers.{name}")
        if not _VALUE.fullmatch(text_value):
            raise FieldError(f"headers.{name} must be printable ASCII on one line", f"headers.{name}")
        seen.add(lower)
    return dict(value)


def access_rule(value):
    """The stored form of `access`: null, or both CIDR lists normalised, and a country list (upper
    case, sorted) when one is given; whether the node can use it is the save's check (core/rules.py)."""
    if value is None:
        return None
    stored = {name: cidr_list(f"access.{name}", value.get(name, [])) for name in ("allow", "deny")}
    if value.get("countries") is not None:
        stored["countries"] = countries_rule(value["countries"])
    return stored


def countries_readable(access: dict | None, countries) -> None:
    """FieldError when `access` (a rule's or a domain's) has a country list and `countries`, the
    node's country database (core/geoip.py), is missing or unusable: saved, it would refuse everyone."""
    if (access or {}).get("countries") and (countries is None or not countries.available):
        missing = countries.missing if countries is not None else "a country database"
        raise FieldError(f"access.countries needs a country database (the geoip_db start-up value naming a "
                         f"country MMDB file, read with the maxminddb package, the geoip extra); this node lacks "
                         f"{missing}", "access.countries")


def countries_rule(value: dict) -> dict:
    """`{"allow": [codes]}` or `{"deny": [codes]}`: one list, at least one code, each two letters."""
    if len(value) != 1:
        raise FieldError('access.countries holds one list: "allow" or "deny"', "access.countries")
    (kind, codes), = value.items()
    where = f"access.countries.{kind}"
    if not codes:
        raise FieldError(f"{where} names at least one country (clear access.countries instead)", where)
    for code in codes:
        if not _COUNTRY.fullmatch(code):
            raise FieldError(f"{where}: {code[:16]!r} is not a two-letter country code (ISO 3166-1, e.g. DE)", where)
    return {kind: sorted({code.upper() for code in codes})}


CLIENTS_REMEMBERED = 4096   # parsed client addresses each process keeps (parsing costs more than the checks)


@lru_cache(maxsize=CLIENTS_REMEMBERED)
def _address(client_ip: str):
    """The client's address (an IPv4 one for ::ffff:a.b.c.d) as (version, integer, rate-limit key);
    ValueError for what is no address."""
    address = ipaddress.ip_address(client_ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.version, int(address), address.packed if address.version == 4 else address.packed[:8]


@lru_cache(maxsize=256)
def _networks(cidrs: tuple) -> tuple:
    """Each distinct stored list parsed once (stored lists are already valid), as (version, network
    integer, mask integer): a membership test is then one AND and one compare per network."""
    nets = (ipaddress.ip_network(cidr) for cidr in cidrs)
    return tuple((net.version, int(net.network_address), int(net.netmask)) for net in nets)


def _listed(version: int, number: int, cidrs: tuple) -> bool:
    return any(v == version and number & mask == network for v, network, mask in _networks(cidrs))


@lru_cache(maxsize=CLIENTS_REMEMBERED)
def _networks_allow(deny: tuple, allow: tuple, client_ip: str) -> bool:
    """The CIDR lists' verdict for one client, remembered: a client's next requests cost one lookup."""
    try:
        version, number, _ = _address(client_ip)
    except ValueError:
        return False   # not an address (a Unix socket peer): nothing a list can allow
    if _listed(version, number, deny):
        return False
    return not allow or _listed(version, number, allow)


def address_allowed(access: dict | None, client_ip: str, countries=None) -> bool:
    """Whether `access` lets the client in: not in `deny`, in `allow` when `allow` lists any, and,
    when the rule has a country list, its country (`countries.country_of`, core/geoip.py) passing it.

    A country list fails closed: without a database (a fleet node lacking one) nobody passes it; an
    address the database does not place (None) is in no allow list and in no deny list."""
    if not access:
        return True
    return _allowed(tuple(access["deny"]), tuple(access["allow"]), access.get("countries"), client_ip, countries)


def _allowed(deny: tuple, allow: tuple, listed: dict | None, client_ip: str, countries) -> bool:
    if not _networks_allow(deny, allow, client_ip):
        return False
    if not listed:
        return True
    if countries is None or not countries.available:
        return False
    country = countries.country_of(client_ip)
    if "allow" in listed:
        return country in listed["allow"]
    return country not in listed["deny"]


class EdgeRule:
    """A rule's `access`, `rate_limit` and `headers` in the form the public port uses them on every
    request, made once per rule when the rule index is built (core/rules.py RuleIndex): the CIDR
    lists as the tuples the verdicts are remembered by, the rate and burst, the header fields to add
    and their lower-case names (a hit would otherwise rebuild them, costing more than the checks)."""

    __slots__ = ("access", "_lists", "rate_limit", "headers", "header_names")

    def __init__(self, rule: dict):
        self.access = access = rule.get("access")
        self._lists = (tuple(access["deny"]), tuple(access["allow"]), access.get("countries")) if access else None
        limit = rule.get("rate_limit")
        self.rate_limit = (limit["rate"], limit["burst"]) if limit else None
        extra = rule.get("headers") or {}
        self.headers = tuple(extra.items())
        self.header_names = frozenset(name.lower() for name in extra)

    def allows(self, client_ip: str, countries=None) -> bool:
        """address_allowed() of the rule's `access`."""
        return self._lists is None or _allowed(*self._lists, client_ip, countries)

    def added(self, headers: list) -> list:
        """`headers` with the rule's `headers` added, replacing any of the same names (any case)."""
        if not self.headers:
            return headers
        names = self.header_names
        return [h for h in headers if h[0].lower() not in names] + list(self.headers)


def client_key(client_ip: str) -> bytes:
    """The bytes a rate limit counts a client by: an IPv4 address whole, an IPv6 address by its /64
    (one subscriber usually holds a whole /64, so counting single addresses would let it multiply)."""
    try:
        return _address(client_ip)[2]
    except ValueError:
        return client_ip.encode("utf-8", "replace")[:64]
