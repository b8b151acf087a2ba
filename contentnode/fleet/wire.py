"""What every fleet module shares: canonical bytes, base64 and the refusal error.

Signatures cover canonical JSON (sorted keys, no spaces, ASCII only), so the
primary and a replica hash the same bytes whatever JSON library wrote them.
"""

import base64
import binascii
import json
import math

from contentnode.core.text import json_loads


class Refused(Exception):
    """A bundle, key certificate or join code that must not be used; `code` names why
    (the replica records it as last_error and the API answers it)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value


def loads(raw):
    """JSON read from the bucket or a join code, as canonical() can write it again: ValueError
    for NaN, Infinity, a number too large for a float and nesting too deep to parse
    (RecursionError), so whoever reads it refuses it instead of failing later."""
    return json_loads(raw, parse_constant=_no_constant, parse_float=_finite)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text, what: str, size: int | None = None) -> bytes:
    """Strict base64 (Refused "malformed" naming `what` otherwise), of exactly `size` bytes if given."""
    if not isinstance(text, str):
        raise Refused("malformed", f"{what} is not base64 text")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise Refused("malformed", f"{what} is not valid base64") from None
    if size is not None and len(data) != size:
        raise Refused("malformed", f"{what} must be {size} bytes")
    return data
