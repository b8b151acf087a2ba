"""API tokens for scripts (docs/API.md, "API tokens"): minted once, stored only as a hash.

Tokens live in their own state section "api_tokens" ({token_id: record}) rather
than inside the user record: revoking or touching last_used_at never rewrites
the user, a plain backup can strip the hashes of one section, and a lookup by
the id embedded in the secret is a single dict access.
"""

import hashlib
import hmac
import re
import secrets

from contentnode import clock
from contentnode.auth.scopes import effective_scopes, invalid_scopes
from contentnode.core.fields import is_time
from contentnode.core.text import one_line

PREFIX = "cn_"
SECTIONS = {"api_tokens": dict}
LAST_USED_GRANULARITY = 60.0  # last_used_at is written at most once a minute per token
_TIMES = ("created_at", "expires_at", "last_used_at")
_HASH = re.compile(r"[0-9a-f]{64}")
NAME_MAX = 64
EXPIRES_IN_MIN, EXPIRES_IN_MAX = 60, 10 * 365 * 86400  # a minute to ten years


class TokenError(ValueError):
    """A token request the caller must fix; field names the offending member."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.code, self.field = status, code, field


def secret_hash(secret: str) -> str:
    """SHA-256 suffices: the secret carries 256 random bits, so no stretching is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()


def public_token(record: dict) -> dict:
    """The token object of docs/API.md, "API tokens" (times as RFC 3339); never the hash."""
    shown = {key: record.get(key) for key in ("id", "name", "scopes")}
    return dict(shown, **{key: clock.rfc3339(record.get(key)) for key in _TIMES})


def user_scopes(user: dict) -> list:
    return effective_scopes(user.get("role", ""), user.get("scopes") or ())


def _name_ok(name) -> bool:
    return isinstance(name, str) and bool(name.strip()) and len(name) <= NAME_MAX and one_line(name)


def mint(doc: dict, user: dict, name, scopes, expires_in, now: float) -> tuple[dict, str]:
    """Validate and add a token for user inside an open transaction; returns (record, secret)."""
    if not _name_ok(name):
        raise TokenError(400, "invalid", f"name must be one line of 1 to {NAME_MAX} characters "
                                         "without control characters", "name")
    if not isinstance(scopes, list) or not scopes or not all(isinstance(s, str) for s in scopes):
        raise TokenError(400, "invalid", "scopes must be a non-empty list of scope names", "scopes")
    unknown = invalid_scopes(scopes)
    held = set(user_scopes(user))
    beyond = [s for s in scopes if s not in held]
    if unknown or beyond:
        raise TokenError(400, "invalid", f"scopes not held by this user: {', '.join(unknown or beyond)}", "scopes")
    if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, int)
                                   or not EXPIRES_IN_MIN <= expires_in <= EXPIRES_IN_MAX):
        raise TokenError(400, "invalid", "expires_in must be null or seconds between 60 and 10 years", "expires_in")
    tokens = doc.setdefault("api_tokens", {})
    if any(t["user_id"] == user["id"] and t["name"] == name for t in tokens.values()):
        raise TokenError(409, "conflict", f"a token named {name!r} already exists", "name")
    token_id = secrets.token_hex(8)
    secret = f"{PREFIX}{token_id}_{secrets.token_hex(32)}"  # 256 bits
    record = {"id": token_id, "user_id": user["id"], "name": name, "scopes": sorted(set(scopes)),
              "created_at": now, "expires_at": None if expires_in is None else now + expires_in,
              "last_used_at": None, "hash": secret_hash(secret)}
    tokens[token_id] = record
    return record, secret


def token_id_of(secret) -> str | None:
    if not isinstance(secret, str) or not secret.startswith(PREFIX):
        return None
    token_id, sep, rest = secret[len(PREFIX):].partition("_")
    return token_id if sep and token_id and rest else None


def live(record: dict | None, now: float) -> bool:
    return record is not None and (record.get("expires_at") is None or record["expires_at"] > now)


def verify(tokens: dict, secret, now: float) -> dict | None:
    """The live record this secret opens, compared in constant time; None otherwise."""
    token_id = token_id_of(secret)
    record = tokens.get(token_id) if token_id else None
    if record is None or not live(record, now):
        return None
    return record if hmac.compare_digest(record["hash"], secret_hash(secret)) else None


def touch(store, token_id: str, now: float) -> None:
    """Record a use; written at most once a minute so a busy script costs no disk writes."""
    record = store.data.get("api_tokens", {}).get(token_id)
    if record is None or (record.get("last_used_at") or 0) > now - LAST_USED_GRANULARITY:
        return
    with store.transaction() as doc:
        if token_id in doc.get("api_tokens", {}):
            doc["api_tokens"][token_id]["last_used_at"] = now


def revoke_all(doc: dict, user_id: str) -> int:
    """Drop every token of a user (inside an open transaction); their sessions end at the next request."""
    tokens = doc.get("api_tokens", {})
    doomed = [tid for tid, t in tokens.items() if t["user_id"] == user_id]
    for token_id in doomed:
        del tokens[token_id]
    return len(doomed)


def for_user(tokens: dict, user_id: str) -> list:
    return sorted((public_token(t) for t in tokens.values() if t["user_id"] == user_id),
                  key=lambda t: (t["created_at"], t["id"]))


def session_scopes(token: dict, owner: dict) -> set:
    """A token session holds the token's scopes intersected with the owner's current ones."""
    return set(token.get("scopes") or ()) & set(user_scopes(owner))


def acting_user(token: dict, owner: dict) -> dict:
    """The user record a token session acts as: the owner, holding only session_scopes."""
    return dict(owner, role="custom", scopes=sorted(session_scopes(token, owner)))


def validate_records(tokens, user_ids) -> None:
    """Used by restore: every record well formed (what sessions and listings read) and owned by a restored user."""
    if not isinstance(tokens, dict):
        raise ValueError("api_tokens must be an object")
    for token_id, record in tokens.items():
        problem = _record_problem(token_id, record, user_ids)
        if problem:
            raise ValueError(f"api token {token_id!r} {problem}")


def _record_problem(token_id: str, t, user_ids) -> str | None:
    if not isinstance(t, dict) or t.get("id") != token_id:
        return "is not a token record under its own id"
    if not isinstance(t.get("user_id"), str) or t["user_id"] not in user_ids:
        return "belongs to no user of the backup"
    if not isinstance(t.get("hash"), str) or not _HASH.fullmatch(t["hash"]):
        return "has no SHA-256 hash (64 lower-case hex digits)"
    scopes = t.get("scopes")
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes) or invalid_scopes(scopes):
        return "holds scopes that are not scope names"
    if not _name_ok(t.get("name")):
        return f"has no name of 1 to {NAME_MAX} characters"
    if not is_time(t.get("created_at")) or any(t.get(key) is not None and not is_time(t[key]) for key in _TIMES):
        return "has a time that is not a time"
    return None
