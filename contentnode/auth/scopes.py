"""Scopes and roles exactly as the spec: one function decides, the router asks it."""

from functools import lru_cache

SCOPES = (
    "metrics:read",
    "domains:read", "domains:write",
    "buckets:read", "buckets:write",
    "routes:read", "routes:write",
    "settings:write",
    "users:manage",
    "notifications:manage",
)

ROLES = {
    "admin": SCOPES,
    "operator": ("metrics:read", "domains:write", "buckets:write", "routes:write"),
    "viewer": ("metrics:read", "domains:read", "buckets:read", "routes:read"),
    "custom": None,  # the scopes chosen for the user
}


def implied(scopes) -> set:
    """x:write includes x:read (where x:read is one of the ten scopes)."""
    result = set(scopes)
    for scope in scopes:
        area, _, kind = scope.partition(":")
        if kind == "write" and f"{area}:read" in SCOPES:
            result.add(f"{area}:read")
    return result


def effective_scopes(role: str, chosen=()) -> list:
    """The scopes a user of this role (and, for custom, these chosen scopes) holds, in spec order."""
    return list(_effective(role, tuple(chosen) if role == "custom" else ()))


@lru_cache(maxsize=256)
def _effective(role: str, chosen: tuple) -> tuple:
    granted = ROLES.get(role)
    if granted is None:
        granted = chosen if role == "custom" else ()
    held = implied(granted)
    return tuple(s for s in SCOPES if s in held)


def allows(user: dict, scope: str) -> bool:
    role = user.get("role", "")
    return scope in _effective(role, tuple(user.get("scopes") or ()) if role == "custom" else ())


def invalid_scopes(scopes) -> list:
    return [s for s in scopes if s not in SCOPES]
