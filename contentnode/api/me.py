"""The logged-in user's own account: who am I, change my password."""

from contentnode.api.login import NEW_PASSWORD, TOKEN_SUMMARY, USER, checked_new_password, password_attempt, session_user, token_summary
from contentnode.http.errors import ApiError
from contentnode.http.response import no_content
from contentnode.http.router import Route
from contentnode.http.schema import answer, obj


def get_me(req):
    """Who this session is: the user, and the API token it logged in with (null for a password login)."""
    return {"user": session_user(req), "token": token_summary(req)}


def change_password(req):
    """Needs the current password; ends every other session of this user."""
    body = req.body
    current = body.get("current_password")
    if not isinstance(current, str) or not current:
        raise ApiError(400, "invalid", "current_password is required", "current_password")
    new = checked_new_password(req, body.get("new_password"), req.user["username"], "new_password")
    # wrong current passwords count like failed logins, so a stolen session cannot guess it here
    if not password_attempt(req, req.user["username"], req.user["password_hash"], current, "me.password",
                            {"reason": "wrong current password"}):
        raise ApiError(400, "invalid", "the current password is wrong", "current_password")
    new_hash = req.app.hasher.hash(new)
    with req.app.store.transaction() as doc:
        record = doc["users"][req.user["id"]]
        record["password_hash"] = new_hash
        record["password_changed_at"] = req.app.clock.now()
    ended = req.app.sessions.end_user_sessions(req.user["id"], keep_id=req.session["id"])
    req.audit("me.password", target=req.user["username"], detail={"other_sessions_ended": ended})
    return no_content()


PASSWORD_BODY = obj({"current_password": {"type": "string", "minLength": 1}, "new_password": NEW_PASSWORD},
                    required=["current_password", "new_password"])

ROUTES = [
    Route("GET", "/api/me", "login", get_me, enrolment_exempt=True,
          answer=answer({"user": USER, "token": TOKEN_SUMMARY})),
    Route("PUT", "/api/me/password", "login", change_password, status=204, body=PASSWORD_BODY, token_session=False),
]
