"""TOTP second factor (RFC 6238 through pyotp) and single-use recovery codes.

The user record's "totp" member holds: enabled, secret (once confirmed),
pending_secret (set up, not yet confirmed), last_step (the newest accepted
time step: a code of that step or an older one is a replay) and recovery
(SHA-256 hashes of the unused recovery codes). Nothing here knows HTTP.
"""

import base64
import hashlib
import hmac
import secrets

ISSUER = "contentnode"
STEP = 30
DRIFT = 1  # time steps accepted either side of now
RECOVERY_CODES = 10


def _pyotp():
    """pyotp (13 modules), imported when a second factor is first set up or checked, not at every
    start; daemon.py checks at start that it is installed."""
    import pyotp
    return pyotp


def new_secret() -> str:
    """A 160-bit secret in base32 (32 characters), as authenticator apps expect."""
    return _pyotp().random_base32(32)


def provisioning_uri(secret: str, username: str, issuer: str) -> str:
    """The otpauth:// URI; the issuer is the node's name, so several nodes differ in an
    authenticator app (a colon would split the app's label, so it becomes a space)."""
    issuer = " ".join(issuer.replace(":", " ").split()) or ISSUER
    return _pyotp().TOTP(secret).provisioning_uri(name=username, issuer_name=issuer)


def is_totp_code(code: str) -> bool:
    """Six ASCII digits (str.isdigit alone also takes "١٢٣٤٥٦", which compare_digest refuses)."""
    return len(code) == 6 and code.isascii() and code.isdigit()


def matching_step(secret: str, code: str, now: float, last_step: int | None = None) -> int | None:
    """The time step `code` belongs to (now, or one step either side), or None.

    A step at or before `last_step` was already used (or is older than one
    that was): refused, so an observed code cannot be replayed.
    """
    if not is_totp_code(code):
        return None
    totp = _pyotp().TOTP(secret)
    current = int(now // STEP)
    for step in (current, current - DRIFT, current + DRIFT):
        if last_step is not None and step <= last_step:
            continue
        if hmac.compare_digest(totp.at(step * STEP), code):
            return step
    return None


def _normalise(code: str) -> str:
    return "".join(code.split()).replace("-", "").lower()


def hash_recovery_code(code: str) -> str:
    """Codes carry 80 random bits, so a plain SHA-256 cannot be reversed by guessing."""
    return hashlib.sha256(_normalise(code).encode()).hexdigest()


def new_recovery_codes(count: int = RECOVERY_CODES) -> tuple[list, list]:
    """(codes to show once, hashes to store); codes look like "abcd-efgh-ijkl-mnop"."""
    codes = []
    for _ in range(count):
        raw = base64.b32encode(secrets.token_bytes(10)).decode().lower()
        codes.append("-".join(raw[i:i + 4] for i in range(0, 16, 4)))
    return codes, [hash_recovery_code(c) for c in codes]


def remaining_after_recovery(hashes: list, code: str) -> list | None:
    """The stored hashes without the one `code` matches, or None when it matches none."""
    wanted = hash_recovery_code(code)
    found = None
    for stored in hashes:
        if hmac.compare_digest(stored, wanted):
            found = stored
    if found is None:
        return None
    return [h for h in hashes if h != found]


def enabled_state(secret: str, step: int, recovery_hashes: list, now: float) -> dict:
    """The "totp" member of a user who just confirmed `secret` with a code of `step`."""
    return {"enabled": True, "secret": secret, "last_step": step, "recovery": recovery_hashes,
            "enabled_at": now}
