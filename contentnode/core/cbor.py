"""A small, strict CBOR decoder (RFC 8949): just what WebAuthn hands the node.

authenticatorData carries a COSE public key and extensions, an attestation
object is a map of a format name, a statement and authenticatorData. Nothing
there needs floats, tags or indefinite lengths, so they are refused, as are
duplicate map keys, map keys other than integers and text, bad UTF-8, nesting
deeper than MAX_DEPTH and more than MAX_ITEMS items in all. A length is
checked against the bytes left before anything is allocated, so a crafted
input costs at most its own size.
"""

MAX_DEPTH = 8
MAX_ITEMS = 1024
_SIMPLE = {20: False, 21: True, 22: None}


class CborError(ValueError):
    """Input that is not the strict CBOR subset this decoder reads."""


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0
        self.items = 0

    def take(self, count: int) -> bytes:
        if count > len(self.data) - self.pos:
            raise CborError("CBOR data ends too early")
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def head(self) -> tuple[int, int]:
        """(major type, argument) of the next data item."""
        first = self.take(1)[0]
        major, info = first >> 5, first & 0x1F
        if info < 24:
            return major, info
        if info in (24, 25, 26, 27):
            return major, int.from_bytes(self.take(1 << (info - 24)), "big")
        raise CborError("indefinite lengths and reserved CBOR values are not accepted")

    def item(self, depth: int):
        if depth > MAX_DEPTH:
            raise CborError("CBOR nested too deeply")
        self.items += 1
        if self.items > MAX_ITEMS:
            raise CborError("too many CBOR items")
        first = self.data[self.pos] if self.pos < len(self.data) else None
        if first is not None and first >> 5 == 7 and (first & 0x1F) in (25, 26, 27):
            raise CborError("CBOR floats are not accepted")
        major, arg = self.head()
        if major == 0:
            return arg
        if major == 1:
            return -1 - arg
        if major == 2:
            return self.take(arg)
        if major == 3:
            try:
                return self.take(arg).decode("utf-8")
            except UnicodeDecodeError:
                raise CborError("CBOR text is not valid UTF-8") from None
        if major == 4:
            self._room(arg)
            return [self.item(depth + 1) for _ in range(arg)]
        if major == 5:
            self._room(2 * arg)
            return self._map(arg, depth)
        if major == 6:
            raise CborError("CBOR tags are not accepted")
        if arg in _SIMPLE:
            return _SIMPLE[arg]
        raise CborError("this CBOR simple value is not accepted")

    def _room(self, count: int) -> None:
        """Every item takes at least one byte: a count beyond the bytes left is a lie."""
        if count > len(self.data) - self.pos:
            raise CborError("CBOR container is longer than the data")

    def _map(self, count: int, depth: int) -> dict:
        out: dict = {}
        for _ in range(count):
            key = self.item(depth + 1)
            if type(key) not in (int, str):
                raise CborError("CBOR map keys must be integers or text")
            if key in out:
                raise CborError("CBOR map has a duplicate key")
            out[key] = self.item(depth + 1)
        return out


def decode_prefix(data: bytes) -> tuple[object, int]:
    """The first data item of `data`, and where it ends (authenticatorData packs items back to back)."""
    reader = _Reader(bytes(data))
    value = reader.item(0)
    return value, reader.pos


def decode(data: bytes):
    """The one data item `data` holds; trailing bytes are an error."""
    value, end = decode_prefix(data)
    if end != len(data):
        raise CborError("trailing bytes after the CBOR data")
    return value
