"""Notification channels (notifications:manage): GET/PUT /api/notifications and
POST /api/notifications/test. The notifier subscribes to the event bus at
start; deliveries run on its background queue, and a final failure is audited."""

from contentnode.core import notify, revisions
from contentnode.core import settings as st
from contentnode.core.fields import FieldError
from contentnode.http.errors import invalid
from contentnode.http.router import Route


def config(app) -> dict:
    return notify.effective(app.store.data)


def view(doc) -> dict:
    """The configuration the API answers: no secrets, and the revision."""
    return dict(notify.public_view(notify.effective(doc)), revision=revisions.of_section(doc, "notifications"))


def get_notifications(req):
    return view(req.app.store.data)


def put_notifications(req):
    with req.app.store.transaction() as doc:
        revisions.require("the notification settings", revisions.of_section(doc, "notifications"), req.if_match)
        new = notify.merge(notify.effective(doc), req.body)
        doc["notifications"] = new
    changed = sorted(f"{part}.{key}" for part, values in req.body.items() for key in values)
    req.audit("notifications.update", detail={"changed": changed})
    return view(doc)


def test_notification(req):
    body = req.body if isinstance(req.body, dict) else None
    if body is None or set(body) != {"channel"}:
        raise invalid('the body must be {"channel": "email"|"telegram"}', "channel")
    channel = body["channel"]
    if channel not in notify.CHANNELS:
        raise invalid("channel must be email or telegram", "channel")
    try:
        notify.require_complete(channel, config(req.app)[channel])
    except FieldError as exc:
        raise invalid(f"{exc}; configure {channel} first", exc.field) from None
    ok, detail = req.app.notifier.test(channel)
    req.audit("notifications.test", target=channel, ok=ok, detail={"detail": detail})
    return {"ok": ok, "detail": detail}


def _panel_notifications(req):
    return view(req.app.store.data)


def build_notifier(app) -> notify.Notifier:
    """The notifier the App holds; failed deliveries are audited."""
    def on_result(channel, event, ok, detail):
        if not ok:
            app.audit.record("notification.failed", target=channel, ok=False,
                             detail={"event": event, "detail": detail})

    return notify.Notifier(
        get_config=lambda: config(app), get_policy=lambda: app.outbound,
        get_node_name=lambda: st.effective(app.store.data)["node_name"], on_result=on_result)


PANEL_SECTIONS = [("notifications", "notifications:manage", _panel_notifications)]

ROUTES = [
    Route("GET", "/api/notifications", "notifications:manage", get_notifications),
    Route("PUT", "/api/notifications", "notifications:manage", put_notifications, if_match=True),
    Route("POST", "/api/notifications/test", "notifications:manage", test_notification),
]
