"""What every fleet module shares: canonical bytes, base64 and the refusal error.

Signatures cover canonical JSON (sorted keys, no spaces, ASCII only), so the
primary and a replica hash the same bytes whatever JSON library wrote them.
"""

import base64
import binascii
import hashlib
import hmac
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


MAC = "mac"


def object_key(fleet_key: bytes, purpose: str) -> bytes:
    """The key that authenticates one kind of object nodes write to the bucket (statuses, leases):
    derived from the fleet key, so only a node holding it can write one a reader accepts."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    return HKDF(hashes.SHA256(), 32, salt=None, info=f"contentnode-fleet/{purpose}".encode()).derive(fleet_key)


def _mac_of(key: bytes, doc: dict) -> str:
    return b64(hmac.new(key, canonical({k: v for k, v in doc.items() if k != MAC}), hashlib.sha256).digest())


def with_mac(key: bytes, doc: dict) -> bytes:
    """`doc` with its "mac" member (HMAC-SHA256 over its canonical bytes), as bytes to write."""
    return canonical(dict(doc, **{MAC: _mac_of(key, doc)}))


def mac_ok(key: bytes, doc) -> bool:
    """Whether a parsed object carries a valid "mac" under `key` (a bucket writer without it: no)."""
    if not isinstance(doc, dict) or not isinstance(doc.get(MAC), str):
        return False
    try:
        return hmac.compare_digest(doc[MAC], _mac_of(key, doc))
    except (ValueError, RecursionError):
        return False
