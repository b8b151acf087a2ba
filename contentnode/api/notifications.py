"""Notification channels (notifications:manage): GET/PUT /api/notifications and
POST /api/notifications/test. The notifier subscribes to the event bus at
start; deliveries run on its background queue, and a final failure is audited."""

from contentnode.core import notify, revisions
from contentnode.core import settings as st
from contentnode.core.events import EVENTS
from contentnode.core.fields import FieldError
from contentnode.http.errors import invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, integer, nullable, obj, one_of, refused, text


def view(doc) -> dict:
    """The configuration the API answers: no secrets, and the revision."""
    return dict(notify.public_view(notify.effective(doc)), revision=revisions.of_section(doc, "notifications"))


def get_notifications(req):
    return view(req.app.store.data)


def put_notifications(req):
    with req.app.store.transaction() as doc:
        revisions.require("the notification settings", revisions.of_section(doc, "notifications"), req.if_match)
        current = notify.effective(doc)
        new = notify.merge(current, req.body)
        notify.check_destinations(new, req.body, req.app.outbound())
        doc["notifications"] = new
    changed = {f"{part}.{key}" for part, values in req.body.items() for key in values}
    generated = new["webhook"]["secret"] != current["webhook"]["secret"] and "secret" not in req.body.get("webhook", {})
    detail = {"changed": sorted(changed - {f"webhook.{notify.GENERATE_SECRET}"} | ({"webhook.secret"} if generated else set()))}
    if generated:
        detail["generated"] = "webhook.secret"
    req.audit("notifications.update", detail=detail)
    answer = view(doc)
    if generated:  # the one time a secret the node made is shown: the receiver needs it
        answer["webhook"]["new_secret"] = new["webhook"]["secret"]
    return answer


def test_notification(req):
    channel = req.body["channel"]  # one of notify.CHANNELS: TEST_BODY says so
    try:
        notify.require_complete(channel, notify.effective(req.app.store.data)[channel])
    except FieldError as exc:
        raise invalid(f"{exc}; configure {channel} first", exc.field) from None
    ok, detail = req.app.notifier.test(channel)
    req.audit("notifications.test", target=channel, ok=ok, detail={"detail": detail})
    return {"ok": ok, "detail": detail}


def _panel_notifications(req):
    return view(req.app.store.data)


def build_notifier(store, audit, outbound, now) -> notify.Notifier:
    """The notifier of the store's notification settings; failed deliveries are audited.
    outbound(): the node's outbound policy of the moment (core/netguard.py NodeOutbound)."""
    def on_result(channel, event, ok, detail):
        if not ok:
            audit.record("notification.failed", target=channel, ok=False, detail={"event": event, "detail": detail})

    return notify.Notifier(
        get_config=lambda: notify.effective(store.data), get_policy=outbound,
        get_node_name=lambda: st.effective(store.data)["node_name"], on_result=on_result, now=now)


PANEL_SECTIONS = [("notifications", "notifications:manage", _panel_notifications)]

def _optional_text(max_length: int) -> dict:
    """A text member where null or "" clears the value."""
    return nullable(text(max_length, min_length=0))


NOTIFICATIONS_BODY = obj({
    "email": obj({"enabled": BOOLEAN, "host": _optional_text(253), "port": integer(1, 65535),
                  "security": one_of(*notify.SECURITY_MODES), "username": _optional_text(254),
                  "password": _optional_text(1024), "from": _optional_text(254),
                  "to": array({"type": "string"}, notify.MAX_RECIPIENTS)}),
    "telegram": obj({"enabled": BOOLEAN, "bot_token": _optional_text(200),
                     "chat_id": {"type": ["string", "integer", "null"]}, "api_url": _optional_text(2048)}),
    "webhook": obj({"enabled": BOOLEAN, "url": _optional_text(2048), "secret": _optional_text(256),
                    notify.GENERATE_SECRET: BOOLEAN}),
    "ntfy": obj({"enabled": BOOLEAN, "server": _optional_text(2048), "topic": _optional_text(64),
                 "token": _optional_text(256)}),
    "events": obj({name: BOOLEAN for name in EVENTS})},
    description="a partial update; a secret (email.password, telegram.bot_token, webhook.secret, ntfy.token) "
                "left out stays, null clears it; webhook.generate_secret makes a new one, answered once")
NOTIFICATIONS = answer({
    "email": answer({"enabled": BOOLEAN, "host": nullable(STRING), "port": integer(1, 65535),
                     "security": one_of(*notify.SECURITY_MODES), "username": nullable(STRING),
                     "password_set": BOOLEAN, "password": refused("is write-only"), "from": nullable(STRING),
                     "to": array(STRING)}, optional=("password",)),
    "telegram": answer({"enabled": BOOLEAN, "bot_token_set": BOOLEAN, "bot_token": refused("is write-only"),
                        "chat_id": {"type": ["string", "integer", "null"]}, "api_url": nullable(STRING)},
                       optional=("bot_token",)),
    "webhook": answer({"enabled": BOOLEAN, "url": nullable(STRING), "secret_set": BOOLEAN,
                       "secret": refused("is write-only"), "new_secret": STRING},
                      optional=("secret", "new_secret")),
    "ntfy": answer({"enabled": BOOLEAN, "server": nullable(STRING), "topic": nullable(STRING),
                    "token_set": BOOLEAN, "token": refused("is write-only")}, optional=("token",)),
    "events": answer({name: BOOLEAN for name in EVENTS})})
TEST_BODY = obj({"channel": one_of(*notify.CHANNELS)}, required=["channel"])

ROUTES = [
    Route("GET", "/api/notifications", "notifications:manage", get_notifications, answer=NOTIFICATIONS),
    Route("PUT", "/api/notifications", "notifications:manage", put_notifications, body=NOTIFICATIONS_BODY,
          answer=NOTIFICATIONS, if_match=True),
    Route("POST", "/api/notifications/test", "notifications:manage", test_notification, body=TEST_BODY),
]
