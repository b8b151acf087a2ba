"""The security policy: 2FA requirement, password length, session and lockout limits."""

TWO_FACTOR_MODES = ("off", "optional", "admins", "all")

DEFAULT_POLICY = {
    "two_factor": "optional",
    "password_min_length": 12,
    "session_idle_timeout": 3600,
    "session_absolute_timeout": 43200,
    "lockout_threshold": 5,
    "lockout_duration": 900,
}


def requires_two_factor(policy: dict, user: dict) -> bool:
    """Whether the policy's two_factor mode demands 2FA of this user (enrolled or not)."""
    mode = policy.get("two_factor", "optional")
    return mode == "all" or (mode == "admins" and user.get("role") == "admin")


def _default_policy() -> dict:
    return dict(DEFAULT_POLICY)


# The state sections the accounts live in: the offline commands open only these.
ACCOUNT_SECTIONS = {"users": dict, "policy": _default_policy}
