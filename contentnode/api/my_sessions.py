"""The caller's own sessions: see where the account is logged in, end one or all the others."""

from contentnode import clock
from contentnode.auth.sessions import clear_cookie_header
from contentnode.http.errors import not_found
from contentnode.http.response import no_content
from contentnode.http.router import Route


def _view(session: dict, current_id: str) -> dict:
    return {
        "id": session["id"],
        "created_at": clock.rfc3339(session["created"]),
        "last_seen_at": clock.rfc3339(session["last_seen"]),
        "ip": session["ip"],
        "user_agent": session["user_agent"],
        "current": session["id"] == current_id,
    }


def list_mine(req):
    """Newest first; the calling session is marked "current"."""
    sessions = sorted(req.app.sessions.for_user(req.user["id"]), key=lambda s: s["created"], reverse=True)
    return {"sessions": [_view(s, req.session["id"]) for s in sessions]}


def end_one(req):
    """Ending the calling session is a logout: the cookie is cleared too."""
    session_id = req.params["id"]
    user_id = req.user["id"]
    if not req.app.sessions.delete_where(lambda s: s["id"] == session_id and s["user_id"] == user_id):
        raise not_found("no such session of yours")
    req.audit("session.end", target=session_id)
    if session_id == req.session["id"]:
        return no_content({"Set-Cookie": clear_cookie_header(req.scheme == "https")})
    return no_content()


def end_others(req):
    ended = req.app.sessions.end_user_sessions(req.user["id"], keep_id=req.session["id"])
    req.audit("session.end_others", target=req.user["username"], detail={"sessions_ended": ended})
    return no_content()


ROUTES = [
    Route("GET", "/api/me/sessions", "login", list_mine, token_session=False),
    Route("DELETE", "/api/me/sessions", "login", end_others, status=204, token_session=False),
    Route("DELETE", "/api/me/sessions/{id}", "login", end_one, status=204, token_session=False),
]
