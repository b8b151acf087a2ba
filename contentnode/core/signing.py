"""Signed links: time-limited URLs for content behind a `signed` rule.

A link carries its expiry, the id of the key that signed it and an
HMAC-SHA256 over (host, decoded path, expiry[, client address]):

    https://cdn.example.com/video/a.mp4?exp=1767225600&kid=3f9a1c2e&sig=<base64url>[&ip=203.0.113.7]

Keys live in a key ring (a dict kept in the state document; the secrets never
leave it). Rotation makes a new current key and gives the previous one a
retirement time, so links already handed out keep working for a grace period.
Verification is one function, `verify`, used by the content path; it compares
signatures in constant time and answers a reason rather than raising.
"""

import base64
import hashlib
import hmac
import ipaddress
import json
import secrets
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

KEY_BYTES = 32
DEFAULT_GRACE = 86_400
MAX_GRACE = 31 * 86_400
MIN_EXPIRES_IN = 1
MAX_EXPIRES_IN = 31 * 86_400
LINK_PARAMS = ("exp", "kid", "sig", "ip")


def empty_ring() -> dict:
    return {"current": None, "keys": {}}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _secret(record: dict) -> bytes:
    text = record["secret"]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _live(ring: dict, now: float) -> dict:
    """The keys of `ring` that still verify at `now` (retired ones dropped)."""
    return {kid: rec for kid, rec in ring.get("keys", {}).items()
            if rec.get("retires_at") is None or rec["retires_at"] > now}


def ensure_key(ring: dict | None, now: float) -> dict:
    """`ring` when it has a current key, else a new ring holding a fresh one."""
    ring = ring or empty_ring()
    if ring.get("current") in ring.get("keys", {}):
        return ring
    kid = secrets.token_hex(4)
    keys = _live(ring, now)
    keys[kid] = {"secret": _b64(secrets.token_bytes(KEY_BYTES)), "created_at": now, "retires_at": None}
    return {"current": kid, "keys": keys}


def rotate(ring: dict | None, now: float, grace: float = DEFAULT_GRACE) -> tuple[dict, str, str | None]:
    """A new ring whose current key is fresh; the old current key verifies until now + grace.

    Returns (ring, new kid, previous kid or None). Keys already past their
    retirement are dropped; grace 0 retires the previous key at once.
    """
    ring = ring or empty_ring()
    previous = ring.get("current") if ring.get("current") in ring.get("keys", {}) else None
    keys = {kid: dict(rec) for kid, rec in _live(ring, now).items()}
    if previous is not None and previous in keys:
        if grace <= 0:
            del keys[previous]
        else:
            keys[previous]["retires_at"] = now + grace
    fresh = ensure_key({"current": None, "keys": keys}, now)
    return fresh, fresh["current"], previous


def canonical_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def _canonical_ip(value: str) -> str:
    return str(ipaddress.ip_address(value.strip().strip("[]")))


def _mac(secret: bytes, host: str, path: str, exp: str, ip: str) -> str:
    message = json.dumps(["contentnode-link-v1", canonical_host(host), path, exp, ip],
                         ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _b64(hmac.new(secret, message, hashlib.sha256).digest())


def sign(ring: dict, host: str, path: str, expires_at: int, client_ip: str | None = None) -> dict:
    """The query parameters that sign (host, decoded path, expiry[, client address])."""
    kid = ring["current"]
    ip = _canonical_ip(client_ip) if client_ip else ""
    params = {"exp": str(int(expires_at)), "kid": kid}
    params["sig"] = _mac(_secret(ring["keys"][kid]), host, path, params["exp"], ip)
    if ip:
        params["ip"] = ip
    return params


def signed_url(ring: dict, url: str, expires_at: int, client_ip: str | None = None) -> str:
    """`url` with its link parameters set (earlier exp/kid/sig/ip are replaced)."""
    parts = urlsplit(url)
    params = sign(ring, parts.hostname or "", unquote(parts.path or "/"), expires_at, client_ip)
    kept = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in LINK_PARAMS]
    query = urlencode(kept + list(params.items()))
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", query, ""))


def verify(ring: dict | None, host: str, path: str, query_params: dict, now: float,
           client_ip: str | None = None) -> tuple[bool, str]:
    """Check a link: (True, "ok") or (False, reason).

    `path` is the decoded request path (as given to rule matching), `host` the
    request's host without port, `query_params` the first value of each query
    parameter. Reasons: missing, malformed, unknown_key, bad_signature,
    expired, ip_mismatch.
    """
    exp, kid, sig = (query_params.get(name) for name in ("exp", "kid", "sig"))
    if not exp or not kid or not sig:
        return False, "missing"
    if not exp.isascii() or not exp.isdigit() or len(exp) > 12:
        return False, "malformed"
    record = _live(ring or empty_ring(), now).get(kid)
    if record is None:
        return False, "unknown_key"
    bound = query_params.get("ip") or ""
    if bound:
        try:
            bound = _canonical_ip(bound)
        except ValueError:
            return False, "malformed"
    expected = _mac(_secret(record), host, path, exp, bound)
    if not hmac.compare_digest(expected.encode("ascii"), sig.encode("utf-8", "replace")):
        return False, "bad_signature"
    if int(exp) <= now:
        return False, "expired"
    if bound:
        try:
            if not client_ip or _canonical_ip(client_ip) != bound:
                return False, "ip_mismatch"
        except ValueError:
            return False, "ip_mismatch"
    return True, "ok"


def public_view(ring: dict | None, now: float) -> dict:
    """What may be shown about the ring: key ids and times, never a secret."""
    ring = ring or empty_ring()
    return {"current_kid": ring.get("current"),
            "keys": [{"kid": kid, "created_at": rec["created_at"], "retires_at": rec.get("retires_at")}
                     for kid, rec in sorted(_live(ring, now).items(), key=lambda kv: kv[1]["created_at"])]}
