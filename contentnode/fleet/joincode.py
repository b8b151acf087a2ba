"""Join codes: everything a replica needs, useless after expires_at.

The primary seals the join payload (bucket, prefix, credentials, fleet key,
fleet_id, the pinned signing key and the recovery public key) with AES-GCM
under a fresh random key and PUTs it as joins/<id> in the bucket. The code,
"cnj_" + base64url of {"v","id","url","k"}, holds a SigV4 presigned GET URL
for that object that expires at expires_at, and the random key. Past
expires_at the bucket refuses the URL, the primary deletes the object, and the
payload's own expires_at is checked again by the joining node. The node
keeps only {id, expires_at} of each code (to delete the object later).
"""

import base64
import os
import secrets

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core import netguard
from contentnode.core.s3 import S3Client
from contentnode.fleet.wire import Refused, canonical, loads

PREFIX = "cnj_"
JOINS = "joins/"
DEFAULT_SECONDS = 3600
MAX_SECONDS = 7 * 24 * 3600   # SigV4's limit for a presigned URL
MIN_SECONDS = 60
CODE_MAX_CHARS = 8192
SEALED_MAX_BYTES = 64 << 10
_AAD = b"contentnode-fleet-join/"
TOMBSTONE_MAX_BYTES = 256
MAX_LIVE = 100   # join codes valid at once on a primary (and as many revoked ones listed)
LISTED = ("id", "created_at", "expires_at", "used_at", "used_by")   # what GET /api/fleet/join-codes shows
STATES = {"used": ("join_code_used", "this join code was already used by another node; mint a new one"),
          "revoked": ("join_code_revoked", "this join code was revoked on the primary; mint a new one")}


def _urlsafe(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unurlsafe(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def object_key(prefix: str, join_id: str) -> str:
    return f"{prefix}{JOINS}{join_id}"


def mint(client: S3Client, prefix: str, payload: dict, expires_in: int, now: float) -> tuple[str, str, str]:
    """(code, join id, expires_at): the sealed payload is in the bucket when this returns."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    join_id = secrets.token_hex(8)
    expires_at = rfc3339(now + expires_in)
    key, nonce = os.urandom(32), os.urandom(12)
    sealed = nonce + AESGCM(key).encrypt(nonce, canonical(dict(payload, expires_at=expires_at)),
                                          _AAD + join_id.encode())
    client.put_object(object_key(prefix, join_id), sealed, "application/octet-stream")
    url = client.presign_get(object_key(prefix, join_id), expires_in)
    code = PREFIX + _urlsafe(canonical({"v": 1, "id": join_id, "url": url, "k": _urlsafe(key)}))
    return code, join_id, expires_at


def _decode(code) -> dict:
    if not isinstance(code, str) or not code.startswith(PREFIX) or len(code) > CODE_MAX_CHARS:
        raise Refused("bad_join_code", "this is not a join code (it starts with cnj_)")
    try:
        inner = loads(_unurlsafe(code[len(PREFIX):].strip()))
    except (ValueError, UnicodeDecodeError):
        raise Refused("bad_join_code", "the join code is damaged (copy it again, whole)") from None
    if not isinstance(inner, dict) or inner.get("v") != 1 or not all(
            isinstance(inner.get(k), str) for k in ("id", "url", "k")):
        raise Refused("bad_join_code", "the join code is damaged (copy it again, whole)")
    return inner


def tombstone(state: str, join_id: str) -> bytes:
    return canonical({"id": join_id, "state": state})


def _refuse_tombstone(body: bytes, join_id: str) -> None:
    """Refused when the code's object is a tombstone (used or revoked) rather than a sealed payload.
    Unsigned: a bucket writer who forges one only stops a join, as deleting the object would."""
    if len(body) > TOMBSTONE_MAX_BYTES or not body.startswith(b"{"):
        return
    try:
        doc = loads(body)
    except (ValueError, UnicodeDecodeError):
        return
    if isinstance(doc, dict) and doc.get("id") == join_id and doc.get("state") in STATES:
        raise Refused(*STATES[doc["state"]])


def redeem(code: str, policy: netguard.OutboundPolicy, now: float, timeout: float = 15.0) -> tuple[str, dict]:
    """(join id, the join payload behind `code`); Refused when it is damaged, expired, used,
    revoked or unreachable."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    inner = _decode(code)
    try:
        result = netguard.fetch(inner["url"], policy, timeout=timeout, max_bytes=SEALED_MAX_BYTES)
    except netguard.OutboundError as exc:
        raise Refused("bucket_unreachable", f"the bucket named in the join code cannot be reached: {exc.message}") \
            from None
    if result.status in (403, 404):
        raise Refused("join_code_expired", "the join code has expired or was used up; mint a new one on the primary")
    if result.status != 200:
        raise Refused("bucket_unreachable", f"the bucket answered {result.status} for the join code")
    _refuse_tombstone(result.body, inner["id"])
    try:
        key = _unurlsafe(inner["k"])
        blob = result.body
        payload = loads(AESGCM(key).decrypt(blob[:12], blob[12:], _AAD + inner["id"].encode()))
    except (InvalidTag, ValueError):
        raise Refused("bad_join_code", "the join code does not open its sealed object") from None
    try:
        expired = parse_rfc3339(payload["expires_at"]) <= now
    except (KeyError, TypeError, ValueError):
        raise Refused("bad_join_code", "the join code's payload is malformed") from None
    if expired:
        raise Refused("join_code_expired", "the join code has expired; mint a new one on the primary")
    return inner["id"], payload


def expired_ids(codes: list, now: float) -> list:
    """The ids of minted codes whose time is up (their objects can go)."""
    out = []
    for item in codes:
        try:
            if parse_rfc3339(item["expires_at"]) <= now:
                out.append(item["id"])
        except (KeyError, TypeError, ValueError):
            out.append(item.get("id"))
    return [i for i in out if isinstance(i, str)]
