"""Server-side sessions: random 256-bit tokens, stored only as SHA-256 hashes.

Sessions live in their own file (sessions.json), not the state document:
logins and logouts write it durably; `last_seen` moves in memory and is
flushed periodically, so a plain read never costs a disk write. Every request
re-reads the user from the store, so a disable, delete, role or password
change takes effect on the very next request.
"""

import hashlib
import json
import logging
import os
import secrets
import threading

from contentnode.auth import tokens
from contentnode.auth.passkeys import has_second_factor
from contentnode.auth.policy import requires_two_factor
from contentnode.fileio import atomic_write

log = logging.getLogger("contentnode.sessions")

COOKIE = "cn_session"
PENDING_LIFETIME = 300.0  # a password-verified login waiting for its 2FA code


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def cookie_header(token: str, secure: bool, max_age: int | None) -> str:
    parts = [f"{COOKIE}={token}", "Path=/", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return "; ".join(parts)


def clear_cookie_header(secure: bool) -> str:
    return cookie_header("", secure, 0)


def read_cookie(headers) -> str | None:
    """Our cookie's value from the Cookie header (tokens are base64url: no quoting to undo)."""
    raw = headers.get("Cookie")
    if not raw:
        return None
    for pair in raw.split(";"):
        name, _, value = pair.strip().partition("=")
        if name == COOKIE:
            return value.strip() or None
    return None


class SessionManager:
    def __init__(self, data_dir: str, store, clock):
        self.path = os.path.join(data_dir, "sessions.json")
        self.store = store
        self.clock = clock
        self._lock = threading.RLock()
        self._sessions: dict[str, dict] = {}  # token hash -> record
        self._dirty = False

    def load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                self._sessions = json.load(f)
        except FileNotFoundError:
            self._sessions = {}
        except (OSError, ValueError) as exc:
            # Sessions are disposable: losing them logs everyone out, nothing more.
            log.warning("sessions file unreadable (%s); everyone must log in again", exc)
            self._sessions = {}

    def _persist(self) -> None:
        atomic_write(self.path, json.dumps(self._sessions, separators=(",", ":")).encode())
        self._dirty = False

    def flush(self) -> None:
        """Write last-seen times moved in memory since the last write."""
        with self._lock:
            if self._dirty:
                self._persist()

    def _policy(self) -> dict:
        return self.store.data.get("policy", {})

    # --- life cycle ---------------------------------------------------------

    def create(self, user_id: str, ip: str, user_agent: str, pending: bool = False,
               api_token: str | None = None) -> tuple[str, dict]:
        """A new session; returns (token for the cookie, record). The token is never stored.

        api_token is the id of the API token a script logged in with, if any.
        """
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        record = {"id": secrets.token_hex(8), "user_id": user_id, "created": now, "last_seen": now,
                  "ip": ip, "user_agent": user_agent[:200], "pending": pending}
        if api_token:
            record["api_token"] = api_token
        with self._lock:
            self._sessions[token_hash(token)] = record
            self._persist()
        return token, record

    def delete_token(self, token: str) -> bool:
        with self._lock:
            found = self._sessions.pop(token_hash(token), None) is not None
            if found:
                self._persist()
            return found

    def delete_where(self, predicate) -> int:
        with self._lock:
            doomed = [h for h, s in self._sessions.items() if predicate(s)]
            for key in doomed:
                del self._sessions[key]
            if doomed:
                self._persist()
            return len(doomed)

    def end_user_sessions(self, user_id: str, keep_id: str | None = None) -> int:
        return self.delete_where(lambda s: s["user_id"] == user_id and s["id"] != keep_id)

    def for_user(self, user_id: str) -> list:
        with self._lock:
            return [dict(s) for s in self._sessions.values() if s["user_id"] == user_id and not s["pending"]]

    def prune(self) -> None:
        """Drop expired sessions (background job)."""
        now = self.clock.now()
        self.delete_where(lambda s: self._expired(s, now))

    def _expired(self, record: dict, now: float) -> bool:
        if record["pending"]:
            return now - record["created"] > PENDING_LIFETIME
        policy = self._policy()
        idle = policy.get("session_idle_timeout", 3600)
        absolute = policy.get("session_absolute_timeout", 43200)
        return now - record["last_seen"] > idle or now - record["created"] > absolute

    def max_age(self) -> int:
        return int(self._policy().get("session_absolute_timeout", 43200))

    # --- per request ----------------------------------------------------------

    def attach(self, req) -> None:
        """Set req.session/req.user (or req.pending_session) from the cookie, when valid."""
        token = read_cookie(req.headers)
        if not token:
            return
        key = token_hash(token)
        now = self.clock.now()
        with self._lock:
            record = self._sessions.get(key)
            if record is None:
                return
            if self._expired(record, now):
                del self._sessions[key]
                self._persist()
                return
            user = self.store.data.get("users", {}).get(record["user_id"])
            api_token = None
            if record.get("api_token"):
                api_token = self.store.data.get("api_tokens", {}).get(record["api_token"])
                if not tokens.live(api_token, now) or user is None or user.get("disabled"):
                    del self._sessions[key]  # revoked or expired token, gone owner: the session ends
                    self._persist()
                    return
            if user is None or user.get("disabled"):
                return
            req.token = token
            if record["pending"]:
                req.pending_session = record
                req.pending_user = user
                return
            record["last_seen"] = now
            self._dirty = True
        req.session = record
        req.user = user
        if api_token is not None:
            req.api_token = api_token
            req.user = tokens.acting_user(api_token, user)
            tokens.touch(self.store, api_token["id"], now)

    def must_enrol(self, user: dict, api_token=None) -> bool:
        """True when the 2FA policy requires 2FA of this user and they have none yet."""
        if api_token is not None or has_second_factor(user, self._policy()):
            return False  # a token session has no second-factor step (docs/API.md, "API tokens")
        return requires_two_factor(self._policy(), user)
