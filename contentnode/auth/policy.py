"""The security policy: 2FA requirement, password length, session and lockout limits."""

from contentnode.store import register_section

TWO_FACTOR_MODES = ("off", "optional", "admins", "all")

DEFAULT_POLICY = {
    "two_factor": "optional",
    "password_min_length": 12,
    "session_idle_timeout": 3600,
    "session_absolute_timeout": 43200,
    "lockout_threshold": 5,
    "lockout_duration": 900,
}


def _default_policy() -> dict:
    return dict(DEFAULT_POLICY)


register_section("policy", _default_policy)
register_section("users", dict)
