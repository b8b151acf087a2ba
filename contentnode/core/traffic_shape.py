"""What of a public request traffic insight keeps: a raw row made the values counted and shown.

The request path appends raw rows (shaped() says what they hold); the top
summaries' fold makes only each column's distinct values what is kept, and does
it over the whole column with string methods run by `map` (no Python call per
value) where the values allow: the fold is traffic insight's main cost
(bench/bench_traffic_fold.py), and under a flood of new clients or referers
every value is distinct. The per-value functions stay the rule the column
forms must equal (tests/test_traffic_summary.py counts both ways).
"""

import ipaddress
from collections.abc import Iterable
from functools import lru_cache
from itertools import repeat
from operator import add, getitem, itemgetter

MAX_PATH = 256        # characters of a path kept (the query string is never part of it)
MAX_REFERER = 253     # a referer is kept as its host name only
CACHED_CLIENTS = 1024  # client addresses whose shaped form is remembered (IPv6 is costly to shape)


@lru_cache(maxsize=CACHED_CLIENTS)
def client_view(address: str | None, mode: str) -> str | None:
    """A client address as the `client_addresses` setting lets it be kept and shown:
    whole, truncated (IPv4 to its /24, IPv6 to its /48) or not at all."""
    if not address or mode == "off":
        return None
    if mode == "full" or "/" in address:
        return address
    if "." in address and ":" not in address:
        return address.rsplit(".", 1)[0] + ".0/24"
    try:
        return str(ipaddress.ip_network(f"{address}/48", strict=False))
    except ValueError:
        return None


def referer_host(value: str | None) -> str:
    """The host name of a Referer header, "" when there is none (or nothing like a URL)."""
    if not value:
        return ""
    _, sep, rest = value.partition("://")
    if not sep:
        return ""
    host = rest.split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    if host.startswith("["):
        host = host.split("]", 1)[0] + "]"
    else:
        host = host.split(":", 1)[0]
    return host.lower()[:MAX_REFERER]


def shaped(row: tuple, client_mode: str) -> tuple:
    """A raw row as the request path appends it, (second, domain, method, path as sent, status,
    bytes, cache outcome or None, client address, Referer header or None, country or None),
    made what is kept and shown: the path without its query string (the request path hands it
    without) cut at MAX_PATH, the cache outcome "none" for neither, the client as the setting
    allows, the referer as its host name."""
    second, domain, method, path, status, nbytes, cache, client, referer, country = row
    return (second, domain, method, path[:MAX_PATH], status, nbytes, cache or "none",
            client_view(client, client_mode), referer_host(referer), country)


FIRST, LAST = itemgetter(0), itemgetter(2)
CUT_PATH = slice(MAX_PATH)
CUT_REFERER = slice(MAX_REFERER)
CACHE_NONE = {None: "none"}


def _parts(values: Iterable, method, sep: str, part) -> map:
    """`part` of each value's partition (or rpartition) at `sep`, over a column."""
    return map(part, map(method, values, repeat(sep)))


def client_column(clients: list, mode: str) -> Iterable:
    """client_view() of each distinct client: a column of IPv4 addresses truncated by string methods
    over the whole column, anything else one (remembered) call each."""
    if mode == "truncated" and None not in clients:
        joined = "\n".join(clients)
        if ":" not in joined and "/" not in joined and all(map(str.__contains__, clients, repeat("."))):
            return map(add, _parts(clients, str.rpartition, ".", FIRST), repeat(".0/24"))
    return map(client_view, clients, repeat(mode))


def referer_column(referers: list) -> Iterable:
    """referer_host() of each distinct Referer header, by string methods over the whole column (one
    call each when a host is bracketed, an IPv6 literal)."""
    if None in referers:
        referers = ["" if value is None else value for value in referers]
    hosts = _parts(referers, str.partition, "://", LAST)
    hosts = _parts(_parts(hosts, str.partition, "/", FIRST), str.partition, "?", FIRST)
    bare = list(_parts(hosts, str.rpartition, "@", LAST))
    if "[" in "\n".join(bare):
        return map(referer_host, referers)
    return map(getitem, map(str.lower, _parts(bare, str.partition, ":", FIRST)), repeat(CUT_REFERER))


def column_views(client_mode: str) -> tuple:
    """Per dimension (path, client, referer, status, cache, country), what makes a column's distinct
    raw values the keys kept: shaped()'s rules, run over a column."""
    return (lambda paths: map(getitem, paths, repeat(CUT_PATH)),
            lambda clients: client_column(clients, client_mode),
            referer_column,
            lambda statuses: map(str, statuses),
            lambda caches: map(CACHE_NONE.get, caches, caches),
            lambda countries: countries)
