"""The update check (settings:write): PUT /api/updates, POST /api/update/check.

It only tells: nothing is downloaded or installed. With auto_check on, a
background job checks once a day (and right after auto_check is switched on)
and raises update_available once per new version.
"""

import logging
import threading

from contentnode import __version__, clock
from contentnode.api.settings import UPDATES, current, store_settings
from contentnode.core import settings as st
from contentnode.core import updates
from contentnode.http.errors import ApiError, invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, nullable, obj, one_of, text

log = logging.getLogger("contentnode.updates")
DAY = 86400


def _public_key(app):
    configured = app.config.update_public_key
    return updates.load_public_key(configured) if configured else updates.shipped_public_key()


def run_check(app) -> dict:
    """Check now, remember the outcome, raise update_available once per new version."""
    cfg = current(app)["updates"]
    try:
        key = _public_key(app)
    except ValueError as exc:
        raise updates.UpdateError(f"the configured update key is unusable: {exc}") from None
    try:
        result = updates.check(cfg["url"], cfg["channel"], __version__, key, app.outbound)
    except updates.UpdateError as exc:
        with app.store.transaction() as doc:
            doc["update_status"].update(error=str(exc), checked_at=clock.rfc3339(app.clock.now()))
        raise
    result["checked_at"] = clock.rfc3339(app.clock.now())
    with app.store.transaction() as doc:
        status = doc["update_status"]
        notify = result["available"] and status.get("notified_version") != result["latest"]
        status.update(result, error=None)
        if notify:
            status["notified_version"] = result["latest"]
    if notify:
        app.events.emit("update_available", current=result["current"], latest=result["latest"],
                        channel=result["channel"], notes=result["notes"])
    return result


def put_updates(req):
    changes = st.validate_updates(req.body)
    merged = dict(current(req.app)["updates"], **changes)
    answer = store_settings(req, {"updates": merged}, "settings.updates")
    if changes.get("auto_check"):
        req.app.update_kick.set()
    return answer["updates"]


def check_now(req):
    if not current(req.app)["updates"]["url"]:
        raise invalid('no update URL is set: PUT /api/updates {"url": ...} first', "url")
    try:
        result = run_check(req.app)
    except updates.UpdateError as exc:
        req.audit("update.check", ok=False, detail={"error": str(exc)})
        raise ApiError(502, "update_check_failed", str(exc)) from None
    req.audit("update.check", detail={"latest": result["latest"], "available": result["available"]})
    return result


def _due(app) -> bool:
    cfg = current(app)["updates"]
    if not (cfg["auto_check"] and cfg["url"]):
        return False
    last = app.store.data["update_status"].get("checked_at")
    return last is None or app.clock.now() - clock.parse_rfc3339(last) >= DAY


def _auto_loop(app, stopping):
    while not stopping.is_set():
        app.update_kick.wait(600)
        app.update_kick.clear()
        if stopping.is_set() or not _due(app):
            continue
        try:
            run_check(app)
        except updates.UpdateError as exc:
            log.warning("automatic update check failed: %s", exc)
        except Exception:
            log.exception("automatic update check failed")


def _panel_updates(req):
    status = {k: v for k, v in req.app.store.data["update_status"].items() if k != "notified_version"}
    return dict(current(req.app)["updates"], current=__version__, status=status or None)


def start_auto_check(app):
    """Start the daily check thread; returns the function that stops it."""
    stopping = threading.Event()

    def stop():
        stopping.set()
        app.update_kick.set()

    threading.Thread(target=_auto_loop, args=(app, stopping), name="update-check", daemon=True).start()
    app.update_kick.set()
    return stop


PANEL_SECTIONS = [("updates", "settings:write", _panel_updates)]

UPDATES_BODY = obj({"channel": one_of(*st.UPDATE_CHANNELS), "auto_check": BOOLEAN, "url": nullable(text(2048))},
                   description="a partial update; url: the signed update feed, null for none")

ROUTES = [
    Route("PUT", "/api/updates", "settings:write", put_updates, body=UPDATES_BODY, answer=UPDATES),
    Route("POST", "/api/update/check", "settings:write", check_now, body=obj({}), body_optional=True, upstream=True),
]
