"""User management (users:manage): accounts, roles and scopes, and the recovery actions.

Two guards hold on every change. The last enabled administrator can be
neither deleted, disabled nor demoted (409 last_admin), so the node always
has someone who can manage it. A users:manage holder who is not an
administrator may only create or touch accounts whose scopes they hold
themselves, and never an administrator, so the scope cannot be turned into
more power. Sessions re-read the user on every request, so a role or scope
change applies on the very next request; disable, delete and a password
reset end the account's sessions.
"""

from contentnode import clock
from contentnode.core import fields as v
from contentnode.core import revisions
from contentnode.api.login import NEW_PASSWORD, USER, USERNAME, checked_new_password
from contentnode.auth import passkeys
from contentnode.auth.ratelimit import address_key, password_key, second_factor_key
from contentnode.auth.scopes import ROLES, SCOPES, effective_scopes
from contentnode.auth.tokens import revoke_all
from contentnode.auth.users import (enabled_admins, find_by_username, find_user, new_user, new_username, public_user,
                                    role_and_scopes)
from contentnode.http.errors import conflict, forbidden, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, listing, nullable, obj, one_of

MANAGE = "users:manage"


def _lockout_keys(user: dict) -> list:
    return [password_key(user["username"]), second_factor_key(user["username"])]


def admin_view(req, user: dict) -> dict:
    """The user object plus what an administrator needs to help the user."""
    now = req.app.clock.now()
    view = public_user(user)
    view["password_changed_at"] = clock.rfc3339(user.get("password_changed_at"))
    view["locked"] = any(req.app.login_limiter.retry_after(k, now) > 0 for k in _lockout_keys(user))
    view["sessions"] = len(req.app.sessions.for_user(user["id"]))
    return view


def user_in_path(req) -> dict:
    """The user named by the {id} path parameter (an id, or else a username), or 404."""
    user = find_user(req.app.store.data["users"], req.params["id"])
    if user is None:
        raise not_found("no such user")
    return user


def _may_manage(req, role: str, scopes) -> None:
    """No privilege escalation: a non-admin manager stays within the scopes they hold."""
    if req.user["role"] == "admin":
        return
    if role == "admin":
        raise forbidden("forbidden", "only an administrator may create or change an administrator")
    held = set(effective_scopes(req.user["role"], req.user.get("scopes") or ()))
    missing = [s for s in effective_scopes(role, scopes) if s not in held]
    if missing:
        raise forbidden("forbidden", f"you cannot grant or manage scopes you do not hold: {', '.join(missing)}")


def _is_enabled_admin(user: dict) -> bool:
    return user["role"] == "admin" and not user.get("disabled")


def _keep_an_admin(before: dict, users: dict) -> None:
    if _is_enabled_admin(before) and not enabled_admins(users):
        raise conflict("last_admin", "this is the last enabled administrator; "
                       "make another user an administrator first", refs=[{"type": "user", "id": before["id"]}])


def _unique_username(doc: dict, username: str) -> None:
    other = find_by_username(doc["users"], username)
    if other is not None:
        raise conflict("conflict", f"a user named {username!r} already exists", "username",
                       refs=[{"type": "user", "id": other["id"]}])


def _record(doc: dict, user: dict, expected=None) -> dict:
    """The user's record in this transaction, at the revision the request's If-Match names (if any)."""
    record = doc["users"].get(user["id"])
    if record is None:
        raise not_found("no such user")
    revisions.require(f"user {record['username']}", revisions.of(record), expected)
    return record


def _own_session_kept(req, user: dict) -> str | None:
    """Acting on one's own account keeps the calling session, as /api/me/password does."""
    return req.session["id"] if user["id"] == req.user["id"] else None


def list_users(req):
    users = sorted(req.app.store.data["users"].values(), key=lambda u: u["username"].lower())
    return {"users": [admin_view(req, u) for u in users]}


def get_user(req):
    return admin_view(req, user_in_path(req))


def create_user(req):
    body = req.body
    username = new_username(body)
    role, scopes = role_and_scopes(body)
    disabled = v.boolean(body, "disabled", default=False)
    _may_manage(req, role, scopes)
    password = checked_new_password(req, body.get("password"), username)
    _unique_username(req.app.store.data, username)
    password_hash = req.app.hasher.hash(password)
    with req.app.store.transaction() as doc:
        _unique_username(doc, username)
        user = new_user(username, password_hash, role, req.app.clock.now(), scopes)
        user["disabled"] = disabled
        doc["users"][user["id"]] = user
    req.audit("user.create", target=username, detail={"role": role, "scopes": scopes, "disabled": disabled})
    req.app.events.emit("user_created", username=username, role=role, by=req.user["username"])
    return created(admin_view(req, user))


def update_user(req):
    """PUT {"role"?, "scopes"?, "disabled"?}: a partial update."""
    body = req.body
    target = user_in_path(req)
    _may_manage(req, target["role"], target.get("scopes"))
    role, scopes = role_and_scopes(body, target)
    disabled = v.boolean(body, "disabled", default=bool(target.get("disabled")))
    _may_manage(req, role, scopes)
    with req.app.store.transaction() as doc:
        record = _record(doc, target, req.if_match)
        before = dict(record)
        record.update(role=role, scopes=scopes, disabled=disabled)
        _keep_an_admin(before, doc["users"])
    changes = {k: [before.get(k), record[k]] for k in ("role", "scopes", "disabled") if before.get(k) != record[k]}
    detail = {"changes": changes}
    if disabled and not before.get("disabled"):
        detail["sessions_ended"] = req.app.sessions.end_user_sessions(record["id"])
    req.audit("user.update", target=record["username"], detail=detail)
    return admin_view(req, record)


def delete_user(req):
    target = user_in_path(req)
    _may_manage(req, target["role"], target.get("scopes"))
    with req.app.store.transaction() as doc:
        before = doc["users"].pop(_record(doc, target, req.if_match)["id"])
        _keep_an_admin(before, doc["users"])
        revoke_all(doc, target["id"])
    ended = req.app.sessions.end_user_sessions(target["id"])
    req.audit("user.delete", target=target["username"], detail={"role": target["role"], "sessions_ended": ended})
    req.app.events.emit("user_deleted", username=target["username"], by=req.user["username"])
    return no_content()


def reset_password(req):
    """PUT {"password"}: sets a new password for another user and ends their sessions.

    Not for one's own account: a session alone must not be enough to change
    one's password; PUT /api/me/password asks for the current one.
    """
    body = req.body
    target = user_in_path(req)
    if target["id"] == req.user["id"]:
        raise forbidden("forbidden", "your own password is changed with PUT /api/me/password, "
                                     "which needs the current one")
    _may_manage(req, target["role"], target.get("scopes"))
    password = checked_new_password(req, body.get("password"), target["username"])
    password_hash = req.app.hasher.hash(password)
    with req.app.store.transaction() as doc:
        record = _record(doc, target, req.if_match)
        record["password_hash"] = password_hash
        record["password_changed_at"] = req.app.clock.now()
    ended = req.app.sessions.end_user_sessions(record["id"])
    req.audit("user.password_reset", target=record["username"], detail={"sessions_ended": ended})
    return admin_view(req, record)


def reset_two_factor(req):
    """DELETE .../2fa: for a user who lost their authenticator and recovery codes.

    Not for one's own account: disabling one's 2FA needs the password (docs/API.md, "Two-factor authentication"),
    which POST /api/me/2fa/disable asks for; a session alone must not be enough.
    """
    target = user_in_path(req)
    if target["id"] == req.user["id"]:
        raise forbidden("forbidden", "your own two-factor authentication is turned off with "
                                     "POST /api/me/2fa/disable, which needs your password")
    _may_manage(req, target["role"], target.get("scopes"))
    with req.app.store.transaction() as doc:
        record = _record(doc, target, req.if_match)
        was = passkeys.clear_second_factors(record)
    req.app.login_limiter.clear(second_factor_key(record["username"]))
    req.audit("user.2fa_reset", target=record["username"], detail=was)
    return no_content()


def end_sessions(req):
    target = user_in_path(req)
    _may_manage(req, target["role"], target.get("scopes"))
    ended = req.app.sessions.end_user_sessions(target["id"], keep_id=_own_session_kept(req, target))
    req.audit("user.sessions_end", target=target["username"], detail={"sessions_ended": ended})
    return no_content()


def clear_lockout(req):
    """Clears the account's failure counts and those of the addresses it logged in from."""
    target = user_in_path(req)
    _may_manage(req, target["role"], target.get("scopes"))
    keys = _lockout_keys(target) + [address_key(a) for a in target.get("known_addresses") or ()]
    cleared = [k for k in keys if req.app.login_limiter.clear(k)]
    req.audit("user.lockout_clear", target=target["username"], detail={"cleared": cleared})
    return no_content()


def _panel_users(req):
    return list_users(req)["users"]


PANEL_SECTIONS = [("users", MANAGE, _panel_users)]

_ROLE = one_of(*ROLES)
_SCOPES = nullable(array(one_of(*SCOPES), len(SCOPES)))  # chosen for the custom role only
CREATE_BODY = obj({"username": USERNAME, "password": NEW_PASSWORD, "role": _ROLE, "scopes": _SCOPES,
                   "disabled": BOOLEAN}, required=["username", "password", "role"])
UPDATE_BODY = obj({"role": _ROLE, "scopes": _SCOPES, "disabled": BOOLEAN})
RESET_BODY = obj({"password": NEW_PASSWORD}, required=["password"])
ADMIN_VIEW = answer({**USER["properties"], "password_changed_at": nullable(STRING), "locked": BOOLEAN,
                     "sessions": {"type": "integer", "minimum": 0}})

ROUTES = [
    Route("GET", "/api/users", MANAGE, list_users, answer=listing("users", ADMIN_VIEW)),
    Route("POST", "/api/users", MANAGE, create_user, status=201, body=CREATE_BODY, answer=ADMIN_VIEW,
          token_session=False),
    Route("GET", "/api/users/{id}", MANAGE, get_user, answer=ADMIN_VIEW),
    Route("PUT", "/api/users/{id}", MANAGE, update_user, body=UPDATE_BODY, answer=ADMIN_VIEW, if_match=True,
          token_session=False),
    Route("DELETE", "/api/users/{id}", MANAGE, delete_user, status=204, if_match=True, token_session=False),
    Route("PUT", "/api/users/{id}/password", MANAGE, reset_password, body=RESET_BODY, answer=ADMIN_VIEW,
          if_match=True, token_session=False),
    Route("DELETE", "/api/users/{id}/2fa", MANAGE, reset_two_factor, status=204, if_match=True, token_session=False),
    Route("DELETE", "/api/users/{id}/sessions", MANAGE, end_sessions, status=204, token_session=False),
    Route("DELETE", "/api/users/{id}/lockout", MANAGE, clear_lockout, status=204, token_session=False),
]
