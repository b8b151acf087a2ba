"""Notification core: configuration rules, message text, and delivery through
a real SMTP server (aiosmtpd) and the local Bot API server."""

import ssl
import threading

import pytest

from contentnode.core import notify
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.notify_transport import DeliveryError, send_email, send_telegram
from contentnode.core.fields import FieldError
from tests.peers.smtp import SmtpServer
from tests.peers.telegram import FakeTelegram

TOKEN = "123456:" + "A" * 35
OPEN = OutboundPolicy(allow_private=True)
FAST_RETRY = notify.RetryPolicy(first=0.05, factor=1.0)


def trust(cert_path):
    return ssl.create_default_context(cafile=cert_path)


def email_cfg(server, **extra):
    cfg = dict(notify.DEFAULT_CONFIG["email"], enabled=True, host="127.0.0.1", port=server.port,
               security=server.mode, **{"from": "node@example.com"}, to=["ops@example.com"])
    cfg.update(extra)
    return cfg


# --- configuration -------------------------------------------------------

def test_merge_keeps_absent_secret_and_clears_null():
    cfg = notify.merge(notify.effective({}), {"telegram": {"bot_token": TOKEN, "chat_id": "42"}})
    assert cfg["telegram"]["bot_token"] == TOKEN
    cfg = notify.merge(cfg, {"telegram": {"chat_id": -100123}})
    assert cfg["telegram"]["bot_token"] == TOKEN and cfg["telegram"]["chat_id"] == "-100123"
    cfg = notify.merge(cfg, {"telegram": {"bot_token": None}})
    assert cfg["telegram"]["bot_token"] is None


def test_public_view_hides_secrets():
    cfg = notify.merge(notify.effective({}), {"email": {"username": "u", "password": "hunter22"},
                                              "telegram": {"bot_token": TOKEN}})
    view = notify.public_view(cfg)
    assert "password" not in view["email"] and view["email"]["password_set"] is True
    assert "bot_token" not in view["telegram"] and view["telegram"]["bot_token_set"] is True
    assert "hunter22" not in repr(view) and TOKEN not in repr(view)


@pytest.mark.parametrize("body,field", [
    ({"email": {"port": 0}}, "email.port"),
    ({"email": {"port": "25"}}, "email.port"),
    ({"email": {"security": "ssl"}}, "email.security"),
    ({"email": {"to": ["not-an-address"]}}, "email.to"),
    ({"email": {"to": "ops@example.com"}}, "email.to"),
    ({"email": {"host": "bad host!"}}, "email.host"),
    ({"email": {"enabled": "yes"}}, "email.enabled"),
    ({"email": {"enabled": True}}, "email.host"),
    ({"email": {"colour": 1}}, "email.colour"),
    ({"telegram": {"bot_token": "../../x"}}, "telegram.bot_token"),
    ({"telegram": {"chat_id": "abc"}}, "telegram.chat_id"),
    ({"telegram": {"api_url": "ftp://x"}}, "telegram.api_url"),
    ({"telegram": {"enabled": True, "bot_token": TOKEN}}, "telegram.chat_id"),
    ({"events": {"no_such_event": True}}, "events.no_such_event"),
    ({"events": {"user_created": 1}}, "events.user_created"),
    ({"sms": {}}, "sms"),
    ({"email": []}, "email"),
])
def test_merge_rejects_bad_input(body, field):
    with pytest.raises(FieldError) as err:
        notify.merge(notify.effective({}), body)
    assert err.value.field == field


def test_format_message_names_node_and_hides_secrets():
    subject, text = notify.format_message("cert_expiring", {"host": "a.example", "days_left": 3,
                                                            "expired": False, "private_key": "SECRET"}, "edge-1")
    assert subject == "[edge-1] Certificate for a.example expires in 3 days"
    assert "expires in 3 days. Check" in text and "expired: False" in text and "SECRET" not in text


@pytest.mark.parametrize("event", sorted(notify.EVENTS))
def test_every_event_the_daemon_emits_formats_without_gaps(event):
    # the fields each emitter in the daemon passes (see the events.emit calls)
    fields = {"cert_expiring": dict(host="h", days_left=3, expired=False),
              "cert_renewal_failed": dict(host="h", error="e", attempts=2, retry_in_seconds=60),
              "domain_check_failed": dict(host="h", step="fetch", detail="d"),
              "bucket_check_failed": dict(id="b1", name="n", step="list", detail="d"),
              "login_failures_burst": dict(key="ip:192.0.2.1", ip="192.0.2.1"),
              "admin_login_new_address": dict(username="u", ip="192.0.2.1"),
              "backup_restored": dict(kind="plain", created_at="t", by="u"),
              "backup_failed": dict(target="b at http://s3", error="e", next_try="t"),
              "update_available": dict(current="1.0.0", latest="1.1.0", channel="stable", notes=""),
              "user_created": dict(username="u", role="viewer", by="root"),
              "user_deleted": dict(username="u", by="root"),
              "fleet_sync_failed": dict(node="n1", code="bucket_error", message="m", seq=3),
              "fleet_node_problem": dict(count=1, node_ids="n2", problems="behind", summary="n2: behind: d"),
              "fleet_probe_failed": dict(node="n1", check="create_once", detail="d")}[event]
    subject, text = notify.format_message(event, fields, "n")
    assert "?" not in subject and "?" not in text.split("\n\n")[0]
    subject, _ = notify.format_message("user_deleted", {}, "n")
    assert subject == "[n] User deleted: ?"


# --- email through aiosmtpd ---------------------------------------------

def test_email_plain_delivers_and_returns_server_reply():
    with SmtpServer("none") as server:
        detail = send_email(email_cfg(server), "Subj", "Body text", OPEN, timeout=10)
        got = server.wait_for(1)
    assert detail.startswith("250") and "accepted" in detail
    assert got[0]["to"] == ["ops@example.com"] and got[0]["message"]["Subject"] == "Subj"
    assert "Body text" in got[0]["message"].get_content() and got[0]["tls"] is False


def test_email_starttls_with_login():
    with SmtpServer("starttls", users={"mailer": "s3cret-pass"}) as server:
        cfg = email_cfg(server, username="mailer", password="s3cret-pass")
        send_email(cfg, "S", "B", OPEN, timeout=10, ssl_context=trust(server.cert_path))
        got = server.wait_for(1)
    assert got[0]["tls"] is True and got[0]["login"] == "mailer"


def test_email_starttls_wrong_password_is_permanent_failure():
    with SmtpServer("starttls", users={"mailer": "right"}) as server:
        with pytest.raises(DeliveryError) as err:
            send_email(email_cfg(server, username="mailer", password="wrong-one"), "S", "B", OPEN,
                       timeout=10, ssl_context=trust(server.cert_path))
    assert "login refused: 535" in str(err.value) and err.value.retry is False
    assert "wrong-one" not in str(err.value)


def test_email_starttls_untrusted_certificate_refused():
    with SmtpServer("starttls") as server:
        with pytest.raises(DeliveryError) as err:
            send_email(email_cfg(server), "S", "B", OPEN, timeout=10)
    assert "certificate not trusted" in str(err.value)
    assert server.inbox.messages == []


def test_email_plain_against_starttls_server_shows_its_refusal():
    with SmtpServer("starttls") as server:
        with pytest.raises(DeliveryError) as err:
            send_email(email_cfg(server, security="none"), "S", "B", OPEN, timeout=10)
    assert "530" in str(err.value)


def test_email_implicit_tls():
    with SmtpServer("tls") as server:
        send_email(email_cfg(server), "S", "B", OPEN, timeout=10, ssl_context=trust(server.cert_path))
        assert server.wait_for(1)[0]["tls"] is False  # TLS below SMTP: aiosmtpd sees no STARTTLS
    # a plain client against an implicit-TLS port fails clearly
    with SmtpServer("tls") as server:
        with pytest.raises(DeliveryError):
            send_email(email_cfg(server, security="none"), "S", "B", OPEN, timeout=1)


def test_email_refused_by_outbound_policy():
    with SmtpServer("none") as server:
        with pytest.raises(DeliveryError) as err:
            send_email(email_cfg(server), "S", "B", OutboundPolicy(allow_private=False), timeout=5)
    assert "private or loopback" in str(err.value) and server.inbox.messages == []


# --- Telegram through the local Bot API server ---------------------------

def tg_cfg(fake, **extra):
    cfg = dict(notify.DEFAULT_CONFIG["telegram"], enabled=True, bot_token=TOKEN, chat_id="42", api_url=fake.url)
    cfg.update(extra)
    return cfg


def test_telegram_delivers():
    with FakeTelegram([TOKEN], ["42"]) as fake:
        detail = send_telegram(tg_cfg(fake), "hello there", OPEN)
        assert fake.messages == [{"chat_id": "42", "text": "hello there", "token": TOKEN}]
    assert detail == "sent (message_id 1)"


@pytest.mark.parametrize("cfg_change,expected", [
    ({"bot_token": "999:" + "B" * 35}, "Telegram answered 401: Unauthorized"),
    ({"chat_id": "7"}, "Telegram answered 400: Bad Request: chat not found"),
])
def test_telegram_error_answers_are_shown_without_token(cfg_change, expected):
    with FakeTelegram([TOKEN], ["42"]) as fake:
        with pytest.raises(DeliveryError) as err:
            send_telegram(tg_cfg(fake, **cfg_change), "hi", OPEN)
    assert str(err.value) == expected and err.value.retry is False
    assert "B" * 35 not in str(err.value) and TOKEN not in str(err.value)


def test_telegram_flood_control_is_retryable():
    with FakeTelegram([TOKEN], ["42"]) as fake:
        fake.fail_next(1, 429)
        with pytest.raises(DeliveryError) as err:
            send_telegram(tg_cfg(fake), "hi", OPEN)
    assert err.value.retry is True and "retry after 1 s" in str(err.value)


# --- the background queue --------------------------------------------------

class Recorder:
    def __init__(self):
        self.results = []
        self.cond = threading.Condition()

    def __call__(self, channel, event, ok, detail):
        with self.cond:
            self.results.append((channel, event, ok, detail))
            self.cond.notify_all()

    def wait(self, count, timeout=20):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.results) >= count, timeout), self.results
            return list(self.results)


def make_notifier(cfg, recorder, **kw):
    n = notify.Notifier(lambda: cfg, lambda: OPEN, lambda: "edge-1", on_result=recorder,
                        retry=FAST_RETRY, timeout=5, **kw)
    n.start()
    return n


def test_queue_delivers_event_on_both_channels():
    with SmtpServer("none") as server, FakeTelegram([TOKEN], ["42"]) as fake:
        cfg = notify.effective({})
        cfg["email"] = email_cfg(server)
        cfg["telegram"] = tg_cfg(fake)
        rec = Recorder()
        n = make_notifier(cfg, rec)
        try:
            n.handle_event("user_created", {"username": "alice", "role": "viewer", "by": "root"})
            results = rec.wait(2)
        finally:
            n.stop()
        mail = server.wait_for(1)[0]["message"]
        tg = fake.wait_for(1)[0]
    assert sorted(r[0] for r in results) == ["email", "telegram"] and all(r[2] for r in results)
    assert mail["Subject"] == "[edge-1] User created: alice"
    assert tg["text"].startswith("[edge-1] User created: alice") and "role viewer" in tg["text"]


@pytest.mark.parametrize("failures, chat_id, event, fields, calls, ok, detail", [
    # transient failures are retried, then the message goes out
    (2, "42", "backup_restored", {"kind": "encrypted"}, 3, True, "sent (message_id 1)"),
    # the retries are bounded: first try + three retries, then it gives up
    (10, "42", "user_deleted", {"username": "bob"}, 4, False, "Telegram answered 500: Internal Server Error"),
    # a permanent error is not retried
    (0, "777", "user_deleted", {"username": "bob"}, 1, False, "Telegram answered 400: Bad Request: chat not found"),
], ids=["retries_transient_failures_then_delivers", "gives_up_after_bounded_retries",
        "does_not_retry_permanent_errors"])
def test_queue_retry_policy(failures, chat_id, event, fields, calls, ok, detail):
    with FakeTelegram([TOKEN], ["42"]) as fake:
        fake.fail_next(failures, 500)
        cfg = notify.effective({})
        cfg["telegram"] = tg_cfg(fake, chat_id=chat_id)
        rec = Recorder()
        n = make_notifier(cfg, rec)
        try:
            n.handle_event(event, fields)
            results = rec.wait(1)
        finally:
            n.stop()
        assert fake.calls == calls and len(fake.messages) == (1 if ok else 0)
    assert results == [("telegram", event, ok, detail)]


def test_switched_off_event_and_disabled_channel_queue_nothing():
    cfg = notify.effective({})
    cfg["telegram"] = dict(cfg["telegram"], enabled=True, bot_token=TOKEN, chat_id="42")
    cfg["events"]["user_created"] = False
    n = notify.Notifier(lambda: cfg, lambda: OPEN, lambda: "n")
    n.handle_event("user_created", {"username": "x"})
    assert n.pending() == 0
    n.handle_event("user_deleted", {"username": "x"})
    assert n.pending() == 1
    cfg["telegram"]["enabled"] = False
    n.handle_event("user_deleted", {"username": "x"})
    assert n.pending() == 1


def test_queue_is_bounded_and_a_storm_is_logged_once(caplog):
    """An event storm keeps the oldest messages, drops the rest, and says so once (and the count once drained)."""
    with FakeTelegram([TOKEN], ["42"]) as fake:
        cfg = notify.effective({})
        cfg["telegram"] = tg_cfg(fake)
        rec = Recorder()
        n = notify.Notifier(lambda: cfg, lambda: OPEN, lambda: "n", on_result=rec, max_pending=2)
        with caplog.at_level("WARNING", logger="contentnode.notify"):
            for i in range(50):
                n.handle_event("user_deleted", {"username": f"u{i}"})
            assert n.pending() == 2
            assert rec.results == [("telegram", "user_deleted", False,
                                    "queue full: this and later messages are dropped until it drains")]
            n.start()
            try:
                rec.wait(3)
                drained = [r.getMessage() for r in caplog.records if "drained" in r.getMessage()]
                n.handle_event("user_deleted", {"username": "after"})
                rec.wait(4)
            finally:
                n.stop()
        texts = [m["text"] for m in fake.messages]
    assert [t.splitlines()[0] for t in texts] == ["[n] User deleted: u0", "[n] User deleted: u1",
                                                  "[n] User deleted: after"]
    full = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(full) == 1 and drained == ["notification queue drained: 48 messages were dropped while it was full"]


def test_test_message_reports_transport_answer():
    with FakeTelegram([TOKEN], ["42"]) as fake:
        cfg = notify.effective({})
        cfg["telegram"] = tg_cfg(fake)
        n = notify.Notifier(lambda: cfg, lambda: OPEN, lambda: "edge-1")
        assert n.test("telegram") == (True, "sent (message_id 1)")
        cfg["telegram"]["chat_id"] = "9"
        assert n.test("telegram") == (False, "Telegram answered 400: Bad Request: chat not found")


def test_every_bus_event_has_a_message_and_a_switch():
    from contentnode.core import events
    assert set(notify.EVENTS) == set(events.EVENTS) == set(notify.DEFAULT_CONFIG["events"])


def test_alert_fields_are_quoted_on_one_line():
    """Text someone typed cannot add lines (phishing text) to an operator's alert."""
    subject, text = notify.format_message("login_failures_burst",
                                          {"key": "user:x\nPlease call +1 555 0100\r\nto unlock", "ip": "192.0.2.1"},
                                          "edge\n1")
    assert "\n" not in subject
    assert "user:x\\nPlease call +1 555 0100\\r\\nto unlock" in text
    assert not any(line.startswith("Please call") for line in text.splitlines())
