"""Passkeys of an account, and the challenges of WebAuthn ceremonies in flight.

A user record's "passkeys" member is a list of public records: the credential
id, its COSE public key, algorithm, sign counter, backup flags and times.
Nothing in it is secret (a passkey's private key never leaves the
authenticator), so plain backups carry it too.

Challenges live in memory only (a restart inside the five minutes just means
trying again). Each is single-use and bound to its ceremony and to a session
(registration, second factor) or, for a passwordless sign-in, to nobody yet:
those are the ones an anonymous client can make the node hold, so they are
capped per client address (an IPv6 address counts by its /64) and in all,
where the busiest address group's oldest challenge makes room for a new one.
"""

import secrets
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass

from contentnode.auth.policy import effective
from contentnode.auth.ratelimit import address_group
from contentnode.core import webauthn

CHALLENGE_LIFETIME = 300.0        # seconds
MAX_ANONYMOUS = 512               # passwordless challenges held at once, all clients together
MAX_ANONYMOUS_PER_ADDRESS = 16    # ... and from one client address
MAX_PASSKEYS = 20                 # per account
REGISTER, SECOND_FACTOR, PASSWORDLESS = "register", "second_factor", "passwordless"


class ChallengesFull(Exception):
    """Too many passwordless challenges wait; `retry_after` seconds until the oldest expires."""

    def __init__(self, retry_after: float):
        super().__init__("too many passkey sign-ins are waiting")
        self.retry_after = retry_after


@dataclass(frozen=True)
class Challenge:
    value: str
    ceremony: str
    bound_to: str | None      # the session id, or None for a passwordless sign-in
    user_id: str | None       # whose passkey must answer (None: any user's discoverable passkey)
    rp_id: str
    origin: str
    address: str              # the client's address group (ratelimit.address_group)
    expires: float


class Challenges:
    """Challenges waiting for their answer: issued, then taken once."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._waiting: OrderedDict[str, Challenge] = OrderedDict()  # oldest first

    def issue(self, ceremony: str, bound_to: str | None, user_id: str | None, rp_id: str, origin: str,
              address: str) -> Challenge:
        """A fresh 256-bit challenge. A session holds one per ceremony: a new one replaces it."""
        now = self.clock.now()
        address = address_group(address)
        challenge = Challenge(webauthn.b64url(secrets.token_bytes(32)), ceremony, bound_to, user_id, rp_id,
                              origin, address, now + CHALLENGE_LIFETIME)
        with self._lock:
            self._drop_expired(now)
            if bound_to is None:
                self._make_room(address, now)
            else:
                for value in [v for v, c in self._waiting.items() if c.bound_to == bound_to
                              and c.ceremony == ceremony]:
                    del self._waiting[value]
            self._waiting[challenge.value] = challenge
        return challenge

    def take(self, value: str, ceremony: str, bound_to: str | None) -> Challenge | None:
        """The live challenge `value` of this ceremony and session, removed: it is never taken twice."""
        with self._lock:
            self._drop_expired(self.clock.now())
            found = self._waiting.get(value)
            if found is None or found.ceremony != ceremony or found.bound_to != bound_to:
                return None
            del self._waiting[value]
            return found

    def _drop_expired(self, now: float) -> None:
        while self._waiting:
            oldest = next(iter(self._waiting.values()))
            if oldest.expires > now:
                return
            self._waiting.popitem(last=False)

    def _make_room(self, address: str, now: float) -> None:
        """Refuse a client holding its own cap; when all of them together hold MAX_ANONYMOUS,
        drop the oldest challenge of the address group holding the most (a flood from many
        addresses pays for itself instead of locking every other sign-in out)."""
        anonymous = [c for c in self._waiting.values() if c.bound_to is None]
        mine = [c for c in anonymous if c.address == address]
        if len(mine) >= MAX_ANONYMOUS_PER_ADDRESS:
            raise ChallengesFull(max(1.0, mine[0].expires - now))
        if len(anonymous) < MAX_ANONYMOUS:
            return
        held = Counter(c.address for c in anonymous)
        busiest = max(held.values())
        victim = next(c for c in anonymous if held[c.address] == busiest)  # oldest first
        del self._waiting[victim.value]


# --------------------------------------------------------------- user records


def usable(policy: dict) -> bool:
    """Whether the policy lets passkeys be registered and used at all."""
    return effective(policy)["passkeys"] != "off"


def of_user(user: dict) -> list:
    return user.get("passkeys") or []


def second_factors(user: dict, policy: dict) -> list:
    """What can complete this user's login after the password: "totp" (an app, or a recovery
    code), "passkey" (while the policy lets passkeys be used)."""
    methods = ["totp"] if (user.get("totp") or {}).get("enabled") else []
    return methods + (["passkey"] if usable(policy) and of_user(user) else [])


def has_second_factor(user: dict, policy: dict) -> bool:
    return bool(second_factors(user, policy))


def find(user: dict, credential_id: bytes) -> dict | None:
    wanted = webauthn.b64url(credential_id)
    return next((p for p in of_user(user) if p["credential_id"] == wanted), None)


def owner_of(users: dict, credential_id: bytes) -> tuple[dict, dict] | None:
    """(user, passkey record) of a registered credential id, on any account."""
    for user in users.values():
        found = find(user, credential_id)
        if found is not None:
            return user, found
    return None


def new_record(passkey: webauthn.NewPasskey, name: str, transports: list, now: float) -> dict:
    return {
        "id": secrets.token_hex(8),
        "name": name,
        "credential_id": webauthn.b64url(passkey.credential_id),
        "public_key": webauthn.b64url(passkey.public_key),
        "algorithm": passkey.algorithm,
        "sign_count": passkey.sign_count,
        "backup_eligible": passkey.backup_eligible,
        "backup_state": passkey.backup_state,
        "aaguid": passkey.aaguid,
        "transports": transports,
        "created_at": now,
        "last_used_at": None,
    }


def record_use(record: dict, assertion: webauthn.Assertion, now: float) -> None:
    record["sign_count"] = assertion.sign_count
    record["backup_state"] = assertion.backup_state
    record["last_used_at"] = now


def clear_second_factors(record: dict) -> dict:
    """A 2FA reset (users:manage, or offline): TOTP off and every passkey gone; what there was."""
    was = {"was_enabled": bool((record.get("totp") or {}).get("enabled")), "passkeys_removed": len(of_user(record))}
    record["totp"] = {"enabled": False}
    record["passkeys"] = []
    return was
