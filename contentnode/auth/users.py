"""User records in the state document, and the one view of them that leaves the node."""

import secrets

from contentnode import clock
from contentnode.auth.scopes import ROLES, SCOPES, effective_scopes, invalid_scopes
from contentnode.core import fields as v
from contentnode.core import revisions
from contentnode.core.fields import FieldError

USERNAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"


def new_username(body: dict) -> str:
    """The username of a new account: 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit."""
    return v.text(body, "username", max_len=64, pattern=USERNAME_PATTERN)


def role_and_scopes(body: dict, current: dict | None = None) -> tuple:
    """The (role, chosen scopes) a create or update asks for; scopes belong to the custom role only.

    Chosen scopes come back in the canonical order of SCOPES.
    """
    role = v.choice(body, "role", tuple(ROLES), required=current is None,
                    default=current["role"] if current else None)
    scopes = v.string_list(body, "scopes", max_items=len(SCOPES), max_len=100)
    if scopes is not None:
        unknown = invalid_scopes(scopes)
        if unknown:
            raise FieldError(f"unknown scope {unknown[0]!r}; scopes are: {', '.join(SCOPES)}", "scopes")
        if role != "custom":
            raise FieldError("scopes are chosen only for the custom role; other roles have fixed scopes", "scopes")
    elif role == "custom" and current and current["role"] == "custom":
        scopes = current.get("scopes") or []
    return role, [s for s in SCOPES if s in set(scopes or ())]

USERNAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"


def public_user(user: dict) -> dict:
    """The user object of docs/API.md, "Authentication"; never a hash, secret or recovery code."""
    return {
        "id": user["id"],
        "username": user["username"],
        "role": user["role"],
        "scopes": effective_scopes(user["role"], user.get("scopes") or ()),
        "two_factor": bool((user.get("totp") or {}).get("enabled") or user.get("passkeys")),
        "disabled": bool(user.get("disabled")),
        "created_at": clock.rfc3339(user.get("created_at")),
        "last_login_at": clock.rfc3339(user.get("last_login_at")),
        "revision": revisions.of(user),
    }


def find_by_username(users: dict, username: str) -> dict | None:
    wanted = username.strip().lower()
    for user in users.values():
        if user["username"].lower() == wanted:
            return user
    return None


def find_user(users: dict, ident: str) -> dict | None:
    """The user with this id, or else with this username (paths name users either way)."""
    return users.get(ident) or find_by_username(users, ident)


def new_user(username: str, password_hash: str, role: str, now: float, scopes=()) -> dict:
    return {
        "id": secrets.token_hex(8),
        "username": username,
        "role": role,
        "scopes": list(scopes) if role == "custom" else [],
        "password_hash": password_hash,
        "disabled": False,
        "created_at": now,
        "last_login_at": None,
        "password_changed_at": now,
        "totp": {"enabled": False},
    }


def enabled_admins(users: dict) -> list:
    return [u for u in users.values() if u["role"] == "admin" and not u.get("disabled")]
