"""Notifications over HTTP: configuration with write-only secrets, test
messages through a real SMTP server (plain and STARTTLS) and the local Bot API
server, and event delivery on the daemon's background queue."""

import os

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.peers.smtp import SmtpServer
from tests.peers.telegram import FakeTelegram

pytestmark = pytest.mark.in_process  # HTTP to the App and local peers; TLS to the SMTP peer needs SSL_CERT_FILE: a daemon process

TOKEN = "4242:" + "T" * 35
SMTP_PASSWORD = "smtp-Pa55word"


@pytest.fixture
def smtp():
    with SmtpServer("starttls", users={"mailer": SMTP_PASSWORD}) as server:
        yield server


@pytest.fixture
def telegram():
    with FakeTelegram([TOKEN], ["42"]) as fake:
        yield fake


@pytest.fixture
def tls_node(tmp_path, smtp):
    """A daemon that trusts the SMTP server's self-made certificate (and only that)."""
    instance = Node(str(tmp_path), env={"SSL_CERT_FILE": smtp.cert_path}).start()
    client = instance.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    instance.admin = client
    yield instance
    instance.kill()


def email_body(server, **extra):
    body = {"enabled": True, "host": "127.0.0.1", "port": server.port, "security": server.mode,
            "from": "node@example.com", "to": ["ops@example.com"]}
    body.update(extra)
    return body


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_config_secrets_are_write_only(node, admin, telegram):
    default = admin.get("/api/notifications")
    assert default.status == 200 and default.json["email"]["enabled"] is False
    assert default.json["email"]["password_set"] is False and default.json["telegram"]["bot_token_set"] is False
    assert set(default.json["events"]) >= {"cert_expiring", "backup_restored", "user_created"}
    answer = admin.put("/api/notifications", {
        "email": {"host": "mail.example.com", "username": "mailer", "password": SMTP_PASSWORD},
        "telegram": {"bot_token": TOKEN, "chat_id": "42", "api_url": telegram.url},
        "events": {"user_created": False}})
    assert answer.status == 200
    assert answer.json["email"]["password_set"] is True and answer.json["telegram"]["bot_token_set"] is True
    assert answer.json["events"]["user_created"] is False and answer.json["events"]["user_deleted"] is True
    for shown in (answer.body, admin.get("/api/notifications").body, admin.get("/api/panel").body,
                  read(os.path.join(node.data_dir, "audit.jsonl"))):
        assert SMTP_PASSWORD.encode() not in shown and TOKEN.encode() not in shown
    # an absent secret stays, null clears it
    kept = admin.put("/api/notifications", {"telegram": {"chat_id": "-1001"}})
    assert kept.json["telegram"]["bot_token_set"] is True and kept.json["telegram"]["chat_id"] == "-1001"
    cleared = admin.put("/api/notifications", {"telegram": {"bot_token": None}})
    assert cleared.json["telegram"]["bot_token_set"] is False


def test_a_stored_secret_is_never_sent_to_a_new_place(admin, telegram):
    """Pointing a channel elsewhere needs its secret again: the stored one would go to the new server."""
    admin.put("/api/notifications", {
        "email": {"host": "mail.example.com", "port": 587, "username": "mailer", "password": SMTP_PASSWORD},
        "telegram": {"bot_token": TOKEN, "chat_id": "42", "api_url": telegram.url}})
    before = admin.get("/api/notifications").json
    for body, field in (({"email": {"host": "mail.attacker.example"}}, "email.password"),
                        ({"email": {"port": 25}}, "email.password"),
                        ({"email": {"security": "none"}}, "email.password"),
                        ({"telegram": {"api_url": "http://127.0.0.1:1/"}}, "telegram.bot_token"),
                        ({"telegram": {"api_url": None}}, "telegram.bot_token")):
        answer = admin.put("/api/notifications", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field, (body, answer.body)
    assert admin.get("/api/notifications").json == before
    # with the secret given again (or cleared), the move is fine; other fields need nothing
    moved = admin.put("/api/notifications", {"email": {"host": "mail2.example.com", "password": SMTP_PASSWORD}})
    assert moved.status == 200 and moved.json["email"]["host"] == "mail2.example.com"
    cleared = admin.put("/api/notifications", {"telegram": {"api_url": "http://127.0.0.1:1/", "bot_token": None}})
    assert cleared.status == 200 and cleared.json["telegram"]["bot_token_set"] is False
    assert admin.put("/api/notifications", {"email": {"from": "node@example.com"}}).status == 200


@pytest.mark.parametrize("body,field", [
    ({"email": {"security": "ssl"}}, "email.security"),
    ({"email": {"enabled": True}}, "email.host"),
    ({"telegram": {"bot_token": "x/../y"}}, "telegram.bot_token"),
    ({"events": {"coffee_ready": True}}, "events.coffee_ready"),
    ({"pager": {}}, "pager"),
])
def test_bad_config_changes_nothing(node, admin, body, field):
    before = read(os.path.join(node.data_dir, "state.json"))
    answer = admin.put("/api/notifications", body)
    assert answer.status == 400 and answer.json["error"]["field"] == field
    assert read(os.path.join(node.data_dir, "state.json")) == before


def test_email_test_plain(admin):
    with SmtpServer("none") as server:
        assert admin.put("/api/notifications", {"email": email_body(server)}).status == 200
        answer = admin.post("/api/notifications/test", {"channel": "email"})
        got = server.wait_for(1)
    assert answer.status == 200 and answer.json["ok"] is True
    assert answer.json["detail"] == "250 Message accepted for delivery"
    assert got[0]["message"]["Subject"] == "[contentnode] Test notification" and got[0]["tls"] is False


def test_email_test_starttls_with_login(tls_node, smtp):
    c = tls_node.admin
    c.put("/api/notifications", {"email": email_body(smtp, username="mailer", password=SMTP_PASSWORD)})
    answer = c.post("/api/notifications/test", {"channel": "email"})
    assert answer.json == {"ok": True, "detail": "250 Message accepted for delivery"}
    got = smtp.wait_for(1)
    assert got[0]["tls"] is True and got[0]["login"] == "mailer"
    c.put("/api/notifications", {"email": {"password": "wrong-password"}})
    refused = c.post("/api/notifications/test", {"channel": "email"})
    assert refused.status == 200 and refused.json["ok"] is False
    assert refused.json["detail"].startswith("login refused: 535")


def test_email_starttls_untrusted_certificate(admin, smtp):
    # the plain `node` fixture does not trust the SMTP server's self-made certificate
    admin.put("/api/notifications", {"email": email_body(smtp, username="mailer", password=SMTP_PASSWORD)})
    answer = admin.post("/api/notifications/test", {"channel": "email"})
    assert answer.json["ok"] is False and "certificate not trusted" in answer.json["detail"]
    assert smtp.inbox.messages == []


def test_telegram_test_and_its_error_answer(admin, telegram):
    admin.put("/api/notifications", {"telegram": {"bot_token": TOKEN, "chat_id": "42", "api_url": telegram.url}})
    assert admin.post("/api/notifications/test", {"channel": "telegram"}).json == \
        {"ok": True, "detail": "sent (message_id 1)"}
    assert "Test notification" in telegram.messages[0]["text"]
    admin.put("/api/notifications", {"telegram": {"chat_id": "777"}})
    assert admin.post("/api/notifications/test", {"channel": "telegram"}).json == \
        {"ok": False, "detail": "Telegram answered 400: Bad Request: chat not found"}


def test_test_needs_a_known_and_configured_channel(admin):
    for body, field in [({"channel": "sms"}, "channel"), ({}, "channel"),
                        ({"channel": "email"}, "email.host"), ({"channel": "telegram"}, "telegram.bot_token")]:
        answer = admin.post("/api/notifications/test", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field


def test_events_are_delivered_by_the_background_queue(node, admin, telegram):
    with SmtpServer("none") as server:
        admin.put("/api/notifications", {
            "email": email_body(server),
            "telegram": {"enabled": True, "bot_token": TOKEN, "chat_id": "42", "api_url": telegram.url}})
        exported = admin.post("/api/backup/export", {}).json
        assert admin.post("/api/backup/restore", {"backup": exported}).status == 200
        mail = server.wait_for(1)[0]["message"]
    tg = telegram.wait_for(1)[0]
    assert mail["Subject"] == "[contentnode] Backup restored"
    assert f"by {ADMIN_USER}" in mail.get_content() and "plain" in mail.get_content()
    assert tg["text"].startswith("[contentnode] Backup restored")


def test_notifications_need_their_scope(node):
    assert node.client().get("/api/notifications").status == 401
    assert node.client().post("/api/notifications/test", {"channel": "email"}).status == 401


def test_a_password_never_travels_without_tls_except_to_this_machine(admin):
    plain = {"enabled": True, "host": "mail.example.com", "port": 25, "security": "none", "username": "mailer",
             "password": SMTP_PASSWORD, "from": "node@example.com", "to": ["ops@example.com"]}
    refused = admin.put("/api/notifications", {"email": plain})
    assert refused.status == 400 and refused.json["error"]["field"] == "email.security"
    assert admin.get("/api/notifications").json["email"]["enabled"] is False
    local = admin.put("/api/notifications", {"email": dict(plain, host="127.0.0.1")})
    assert local.status == 200 and local.json["email"]["enabled"] is True
    assert admin.put("/api/notifications", {"email": dict(plain, security="starttls")}).status == 200
