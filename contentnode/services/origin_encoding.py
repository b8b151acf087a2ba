"""Compression of the shared cache's answers (rules in cache_mode "origin"), by the rules of
bucket content (core/encodings.py): a stored 200 of a compressible type and size, which the
origin did not encode itself and did not mark `no-transform`, goes to a client that accepts a
coding compressed once per stored answer and coding, and every answer of it says
`Vary: Accept-Encoding`.

The compressed variant is a cache entry beside the stored answer (its key plus the coding, so
a purge of the URL takes it too), made from the stored body when a hit first needs it, tied to
that very entry's body (a replaced answer is compressed again; a 304's refresh keeps the body, its id
and so the variant, sent under the refreshed fields) and expiring with it. The
answer that fills the cache streams as the origin sent it; the hits after it go compressed.
"""

import logging

from contentnode.core import encodings
from contentnode.core import http_cache as hc
from contentnode.core.cache_fill import OriginAnswer
from contentnode.core.shared_cache import KEEP_FOR, Exchange
from contentnode.core.shared_hit import parsed

log = logging.getLogger("contentnode.content")

NOT_ENCODED = 409   # the variant's fill when its source went away meanwhile: identity is sent


def compressible(exchange: Exchange) -> bool:
    """Whether clients that accept a coding get this answer compressed (a hit or not)."""
    if exchange.status != 200 or exchange.result.size is None or exchange.field("content-encoding"):
        return False
    if "no-transform" in hc.directives(exchange.field("cache-control")) or "*" in (exchange.field("vary") or ""):
        return False   # the origin forbids transforms, or varies on everything (never stored)
    meta = {"content_type": exchange.field("content-type")}
    return encodings.compressible(meta, exchange.result.size)


def _with_vary(exchange: Exchange) -> list:
    """The exchange's headers saying `Vary: Accept-Encoding` (added to its Vary, or a new one)."""
    headers, vary = exchange.headers, exchange.field("vary")
    if vary is not None and "accept-encoding" in [v.strip().lower() for v in vary.split(",")]:
        return headers
    kept = [(k, v) for k, v in headers if k.lower() != "vary"]
    return kept + [("Vary", f"{vary}, Accept-Encoding" if vary else "Accept-Encoding")]


def _fetch(delivery, entry, coding: str):
    def fetch() -> OriginAnswer:
        source = delivery.cache.lookup(entry.key)
        if source is None or source.entry is None or source.entry.uid != entry.uid:
            if source is not None:
                source.close()
            return OriginAnswer(NOT_ENCODED)
        with delivery.compressions.hold(source.size):
            out = encodings.compress(coding, source.read_all())
        return OriginAnswer(200, {"source": entry.uid, "encoded": coding}, len(out), [out],
                            expires_at=entry.expires_at, at_hand=True)
    return fetch


def _variant_key(entry, coding: str) -> tuple:
    return entry.key + ("coding\0" + coding,)


def encoded(delivery, target, exchange: Exchange, accept_encoding: str | None) -> Exchange:
    """The exchange as the client gets it: compressed when it may be and the client accepts a
    coding (a hit only), with `Vary: Accept-Encoding` whenever the answer is compressible."""
    if not target.rule["compress"] or not compressible(exchange):
        return exchange
    headers = _with_vary(exchange)
    coding = encodings.choose(accept_encoding)
    entry = exchange.result.entry
    if coding is None or not exchange.hit or entry is None:
        return Exchange(exchange.status, headers, exchange.result, exchange.hit, exchange.cache_status, exchange.memo)
    uid = entry.uid
    try:
        variant = delivery.cache.get(_variant_key(entry, coding), _fetch(delivery, entry, coding),
                                     KEEP_FOR, lambda e: e.meta.get("source") == uid)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot be made: the stored answer goes as it is
        log.warning("compressing a stored answer failed: %s", exc)
        variant = None
    if variant is None or variant.status != 200:
        if variant is not None:
            variant.close()
        return Exchange(exchange.status, headers, exchange.result, exchange.hit, exchange.cache_status, exchange.memo)
    exchange.result.close()
    return _as_variant(exchange, headers, variant, coding)


def _as_variant(exchange: Exchange, headers: list, variant, coding: str) -> Exchange:
    """The stored answer's exchange sent as its compressed variant (`variant`, a cache Result)."""
    etag = encodings.tagged(exchange.field("etag"), coding)   # `headers` differ from the exchange's in Vary only
    headers = [(k, v) for k, v in headers if k.lower() != "etag"] + [("Content-Encoding", coding)]
    if etag:
        headers.append(("ETag", etag))
    return Exchange(exchange.status, headers, variant, True, exchange.cache_status)


def _entry_compressible(entry, exchange: Exchange) -> bool:
    """compressible() of a hit on `entry`, decided once per entry: it reads only the stored
    answer's status, size and fields."""
    derived = (exchange.memo or parsed(entry)).derived
    verdict = derived.get("compressible")
    if verdict is None:
        verdict = derived["compressible"] = compressible(exchange)
    return verdict


def held(delivery, target, exchange: Exchange, accept_encoding: str | None) -> tuple[Exchange, list] | None:
    """What encoded() gives for a hit held in memory (SharedCache.held), when it needs no wait:
    (the exchange, the cache entries whose hits to count once it is answered); None when the
    compressed variant it would send is not held in memory (made or read by encoded())."""
    entry = exchange.result.entry
    if not target.rule["compress"] or not _entry_compressible(entry, exchange):
        return exchange, [entry]
    headers = _with_vary(exchange)
    coding = encodings.choose(accept_encoding)
    if coding is None:
        return Exchange(exchange.status, headers, exchange.result, True, exchange.cache_status, exchange.memo), [entry]
    found = delivery.cache.in_memory(_variant_key(entry, coding))
    if found is None or found[0].meta.get("source") != entry.uid:
        return None
    variant = delivery.cache.held_result(*found)
    return _as_variant(exchange, headers, variant, coding), [entry, found[0]]
