"""The verification proof: shows that a domain reaches this node and not another.

The panel fetches /.well-known/service/check?nonce=N through the domain; the
node answers HMAC-SHA256(node secret, N). Only this node knows its secret, so
a matching proof for a fresh nonce proves the name leads here.
"""

import hashlib
import hmac
import re
import secrets

CHECK_PATH = "/.well-known/service/check"
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")


def valid_nonce(nonce) -> bool:
    return isinstance(nonce, str) and _NONCE.fullmatch(nonce) is not None


def proof(secret: bytes, nonce: str) -> str:
    return hmac.new(secret, nonce.encode("ascii"), hashlib.sha256).hexdigest()


def proof_matches(secret: bytes, nonce: str, candidate) -> bool:
    """Constant-time; a candidate that is not ASCII text (a remote page chose it) is no match."""
    return (isinstance(candidate, str) and candidate.isascii()
            and hmac.compare_digest(proof(secret, nonce), candidate))


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def new_secret() -> str:
    return secrets.token_hex(32)
