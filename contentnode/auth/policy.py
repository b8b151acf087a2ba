"""The security policy: 2FA requirement, password length, session and lockout limits."""

from contentnode.core import fields as v
from contentnode.core.config_doc import Whole, object_at
from contentnode.core.fields import FieldError

TWO_FACTOR_MODES = ("off", "optional", "admins", "all")
PASSKEY_MODES = ("off", "second_factor", "passwordless")

DEFAULT_POLICY = {
    "two_factor": "optional",
    "password_min_length": 12,
    "session_idle_timeout": 3600,
    "session_absolute_timeout": 43200,
    "lockout_threshold": 5,
    "lockout_duration": 900,
    "passkeys": "second_factor",
}


DAY = 86400
LIMITS = {
    "password_min_length": (8, 128),
    "session_idle_timeout": (60, 30 * DAY),
    "session_absolute_timeout": (300, 365 * DAY),
    "lockout_threshold": (1, 100),
    "lockout_duration": (10, 7 * DAY),
}


def effective(policy: dict) -> dict:
    """The stored policy with every member: one written before a member existed (passkeys)
    has the default for it."""
    return dict(DEFAULT_POLICY, **policy)


def checked_policy(body: dict, current: dict) -> dict:
    """The whole policy after the partial update `body`, checked as a whole (FieldError otherwise).

    The idle timeout may not exceed the absolute one; the field named is the one body changes.
    """
    v.only(body, DEFAULT_POLICY)
    wanted = effective(current)
    wanted["two_factor"] = v.choice(body, "two_factor", TWO_FACTOR_MODES, default=wanted["two_factor"])
    wanted["passkeys"] = v.choice(body, "passkeys", PASSKEY_MODES, default=wanted["passkeys"])
    for name, (lo, hi) in LIMITS.items():
        wanted[name] = v.integer(body, name, lo, hi, default=wanted[name])
    if wanted["session_idle_timeout"] > wanted["session_absolute_timeout"]:
        field = "session_idle_timeout" if "session_idle_timeout" in body else "session_absolute_timeout"
        raise FieldError("session_idle_timeout must not exceed session_absolute_timeout", field)
    return wanted


def _apply_section(tx, given) -> list:
    """The configuration document's policy (core/config_doc.py): every member, one left out its default;
    written only when the node's differs. A policy holds no secret."""
    wanted = checked_policy(object_at(given, "policy"), DEFAULT_POLICY)
    if effective(tx["policy"]) != wanted:
        tx["policy"] = wanted
    return []


SECTION = Whole(lambda doc: effective(doc["policy"]), _apply_section)


def requires_two_factor(policy: dict, user: dict) -> bool:
    """Whether the policy's two_factor mode demands 2FA of this user (enrolled or not)."""
    mode = policy.get("two_factor", "optional")
    return mode == "all" or (mode == "admins" and user.get("role") == "admin")


def _default_policy() -> dict:
    return dict(DEFAULT_POLICY)


# The state sections the accounts live in: the offline commands open only these.
ACCOUNT_SECTIONS = {"users": dict, "policy": _default_policy}
