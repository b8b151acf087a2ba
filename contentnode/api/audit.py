"""GET /api/audit (users:manage): the activity log, newest first, filtered and paged.

Query: user, action (exact, or a prefix ending in "." such as "user."),
since and until (RFC 3339), limit (1-500, default 100) and cursor (the
next_cursor of the previous page). Unknown parameters are refused by the
dispatcher (Route.query), so a typo never silently returns everything.
"""

from contentnode import clock
from contentnode.core.text import whole_number
from contentnode.http.errors import invalid
from contentnode.http.router import Route

MAX_LIMIT = 500
PARAMETERS = frozenset({"user", "action", "since", "until", "limit", "cursor"})


def _time(query: dict, name: str) -> float | None:
    if name not in query:
        return None
    try:
        return clock.parse_rfc3339(query[name])
    except ValueError:
        raise invalid(f"{name} must be an RFC 3339 time such as 2026-01-31T12:00:00Z", name) from None


def _whole(query: dict, name: str, lo: int, hi: int, default: int | None) -> int | None:
    text = query.get(name)
    if text is None:
        return default
    number = whole_number(text)
    if number is None or not lo <= number <= hi:
        raise invalid(f"{name} must be a whole number from {lo} to {hi}", name)
    return number


def _text(query: dict, name: str) -> str | None:
    value = query.get(name)
    if value is not None and not 0 < len(value) <= 200:
        raise invalid(f"{name} must be 1 to 200 characters", name)
    return value


def list_entries(req):
    query = req.query
    entries, next_id = req.app.audit.query(
        user=_text(query, "user"), action=_text(query, "action"),
        since=_time(query, "since"), until=_time(query, "until"),
        limit=_whole(query, "limit", 1, MAX_LIMIT, 100),
        cursor=_whole(query, "cursor", 1, 2 ** 62, None))
    return {"entries": entries, "next_cursor": str(next_id) if next_id is not None else None}


ROUTES = [Route("GET", "/api/audit", "users:manage", list_entries, query=PARAMETERS)]
