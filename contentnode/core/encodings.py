"""Content codings: which objects are compressed, with what, and which coding a client gets.

An object is compressed once per coding and kept in the cache as its own
variant (services/delivery.py), so the cost here is paid per object, never per
request: that is why the levels are high. gzip comes with the interpreter
(zlib); zstd with Python 3.14's compression.zstd or the `zstd` extra
(backports-zstd, the same module for older interpreters); br with the
`brotli` extra (Google's brotli package). docs/API.md ("Compressed
delivery") is the reference for the choices made here.
"""

import functools
import importlib
import zlib

MIN_BYTES = 512          # below this nothing is compressed: the saving is smaller than a header
MAX_BYTES = 8 << 20      # above this nothing is compressed: the source is read into memory
AT_ONCE = 2              # compressions running at once per process (CPU bound)
GZIP_LEVEL = 6
ZSTD_LEVEL = 12
BROTLI_QUALITY = 9

# media types compressed besides text/* and the +json / +xml structured suffixes
COMPRESSIBLE_TYPES = frozenset({
    "application/json", "application/javascript", "application/x-javascript", "application/ecmascript",
    "application/xml", "application/wasm", "image/svg+xml",
})


def _gzip(data: bytes) -> bytes:
    # wbits 31: the gzip container, with a zero timestamp, so equal input gives equal bytes
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def _module(*names: str):
    """The first of these modules that imports (optional extras), or None."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _available() -> dict:
    """coding -> compress function, in the node's order of preference for equal client weights."""
    found: dict = {"gzip": _gzip}
    zstd = _module("compression.zstd", "backports.zstd")   # Python 3.14+, else the zstd extra
    if zstd is not None:
        found["zstd"] = lambda data: zstd.compress(data, level=ZSTD_LEVEL)
    brotli = _module("brotli")
    if brotli is not None:
        found["br"] = lambda data: brotli.compress(data, quality=BROTLI_QUALITY)
    return {name: found[name] for name in ("zstd", "br", "gzip") if name in found}


CODERS = _available()
OFFERED = tuple(CODERS)
_ALIASES = {"x-gzip": "gzip"}   # RFC 9110 8.4.1.3


def compress(coding: str, data: bytes) -> bytes:
    return CODERS[coding](data)


def compressible_type(content_type: str | None) -> bool:
    media = (content_type or "").partition(";")[0].strip().lower()
    return (media.startswith("text/") or media in COMPRESSIBLE_TYPES
            or media.endswith("+json") or media.endswith("+xml"))


def compressible(meta: dict, size: int) -> bool:
    """Whether an object (its cache meta and size) is sent compressed to clients that accept it."""
    return (MIN_BYTES <= size <= MAX_BYTES and not meta.get("content_encoding")
            and compressible_type(meta.get("content_type")))


def tagged(etag: str | None, coding: str) -> str | None:
    """The entity tag of an object's `coding` variant: the identity tag with "-<coding>" inside
    the quotes, weak if that one was weak, so no two representations share a tag."""
    if not etag or not etag.endswith('"'):
        return etag
    return f'{etag[:-1]}-{coding}"'


def _weight(params: list) -> float | None:
    """The q of an Accept-Encoding item (1 without one), None when it is malformed."""
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return None
            return q if 0 <= q <= 1 else None
    return 1.0


@functools.lru_cache(maxsize=512)
def choose(accept_encoding: str | None) -> str | None:
    """The coding to send for this Accept-Encoding value, None for identity (RFC 9110 12.5.3).

    No header, an empty one, or no acceptable coding: identity, never a 406 (the
    RFC's SHOULD for a server that has the identity representation, even when
    the client wrote identity;q=0). A coding counts when it is listed with q > 0,
    or "*" has q > 0 and it is not listed; it wins over identity unless identity
    (listed, or through "*") has a higher q; equal q goes to the order in OFFERED.
    Memoised: browsers send a handful of distinct values.
    """
    if not accept_encoding:
        return None
    weights: dict[str, float] = {}
    for item in accept_encoding.split(","):
        name, *params = item.split(";")
        name = name.strip().lower()
        q = _weight(params)
        if name and q is not None:
            weights[_ALIASES.get(name, name)] = q
    star = weights.get("*")
    best, best_q = None, 0.0
    for coding in OFFERED:
        q = weights.get(coding, star if star is not None else 0.0)
        if q > best_q:
            best, best_q = coding, q
    identity_q = weights.get("identity", star)
    if best is None or (identity_q is not None and identity_q > best_q):
        return None
    return best
