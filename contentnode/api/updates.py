"""The update check (settings:write): PUT /api/updates, POST /api/update/check.

The check and its daily job are services/updates.py; it only tells: nothing is
downloaded or installed.
"""

from contentnode import __version__
from contentnode.api.settings import UPDATES, current, store_settings
from contentnode.core import settings as st
from contentnode.core import updates
from contentnode.http.errors import ApiError, invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, nullable, obj, one_of, text


def put_updates(req):
    changes = st.validate_updates(req.body)
    merged = dict(current(req.app)["updates"], **changes)
    answer = store_settings(req, {"updates": merged}, "settings.updates")
    if changes.get("auto_check"):
        req.app.update_check.kick()
    return answer["updates"]


def check_now(req):
    if not current(req.app)["updates"]["url"]:
        raise invalid('no update URL is set: PUT /api/updates {"url": ...} first', "url")
    try:
        result = req.app.update_check.run()
    except updates.UpdateError as exc:
        req.audit("update.check", ok=False, detail={"error": str(exc)})
        raise ApiError(502, "update_check_failed", str(exc)) from None
    req.audit("update.check", detail={"latest": result["latest"], "available": result["available"]})
    return result


def _panel_updates(req):
    status = {k: v for k, v in req.app.store.data["update_status"].items() if k != "notified_version"}
    return dict(current(req.app)["updates"], current=__version__, status=status or None)


PANEL_SECTIONS = [("updates", "settings:write", _panel_updates)]

UPDATES_BODY = obj({"channel": one_of(*st.UPDATE_CHANNELS), "auto_check": BOOLEAN, "url": nullable(text(2048))},
                   description="a partial update; url: the signed update feed, null for none")

ROUTES = [
    Route("PUT", "/api/updates", "settings:write", put_updates, body=UPDATES_BODY, answer=UPDATES),
    Route("POST", "/api/update/check", "settings:write", check_now, body=obj({}), body_optional=True, upstream=True),
]
