"""The logged-in user's own account: who am I, change my password."""

from contentnode.api import validate as v
from contentnode.api.login import (attempt_succeeded, check_rate_limit, checked_new_password, count_failure,
                                     limiter_keys)
from contentnode.auth.users import public_user
from contentnode.http.errors import ApiError
from contentnode.http.response import no_content
from contentnode.http.router import Route


def get_me(req):
    return {"user": public_user(req.user)}


def change_password(req):
    """Needs the current password; ends every other session of this user."""
    body = v.require_object(req.body)
    v.only(body, {"current_password", "new_password"})
    current = body.get("current_password")
    if not isinstance(current, str) or not current:
        raise ApiError(400, "invalid", "current_password is required", "current_password")
    new = checked_new_password(req, body.get("new_password"), req.user["username"], "new_password")
    # wrong current passwords count like failed logins, so a stolen session cannot guess it here
    keys = limiter_keys(req, req.user["username"])
    check_rate_limit(req, keys)
    if not req.app.hasher.verify(req.user["password_hash"], current[:4096]):
        count_failure(req, keys, req.user["username"], "me.password", {"reason": "wrong current password"})
        raise ApiError(400, "invalid", "the current password is wrong", "current_password")
    attempt_succeeded(req)
    new_hash = req.app.hasher.hash(new)
    with req.app.store.transaction() as doc:
        record = doc["users"][req.user["id"]]
        record["password_hash"] = new_hash
        record["password_changed_at"] = req.app.clock.now()
    ended = req.app.sessions.end_user_sessions(req.user["id"], keep_id=req.session["id"])
    req.audit("me.password", target=req.user["username"], detail={"other_sessions_ended": ended})
    return no_content()


ROUTES = [
    Route("GET", "/api/me", "login", get_me, enrolment_exempt=True),
    Route("PUT", "/api/me/password", "login", change_password),
]
