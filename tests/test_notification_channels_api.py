"""The webhook and ntfy channels over HTTP: write-only secrets (a generated
webhook secret is answered once), test sends verified by local receivers, the
outbound rules at save and at send, the node's clock in the signature, event
delivery on the background queue, and backups that carry the secrets only
encrypted."""

import json
import os

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.peers.webhook import NtfyReceiver, WebhookReceiver

pytestmark = pytest.mark.in_process  # HTTP to the App and local receivers; https under a test CA: a daemon process

SECRET = "whk-" + "0123456789abcdef" * 2
NTFY_TOKEN = "tk_" + "n" * 29


def read(path):
    with open(path, "rb") as f:
        return f.read()


def shown_everywhere(node, admin):
    """Every place a secret must never appear: answers, the panel, the audit log, a plain backup."""
    return [admin.get("/api/notifications").body, admin.get("/api/panel").body,
            read(os.path.join(node.data_dir, "audit.jsonl")), admin.post("/api/backup/export", {}).body]


def test_webhook_secret_generated_once_and_the_test_send_verifies(node, admin):
    answer = admin.put("/api/notifications", {"webhook": {"enabled": True, "url": "http://127.0.0.1:9/in"}})
    assert answer.status == 200 and answer.json["webhook"]["secret_set"] is True
    generated = answer.json["webhook"]["new_secret"]
    assert len(generated) >= 40 and "secret" not in answer.json["webhook"]
    for shown in shown_everywhere(node, admin):
        assert generated.encode() not in shown and b"new_secret" not in shown
    audit = [json.loads(line) for line in read(os.path.join(node.data_dir, "audit.jsonl")).splitlines()]
    assert audit[-2]["detail"] == {"changed": ["webhook.enabled", "webhook.secret", "webhook.url"],
                                   "generated": "webhook.secret"}
    with WebhookReceiver(generated) as receiver:
        moved = admin.put("/api/notifications", {"webhook": {"url": receiver.url + "/in"}})
        assert "new_secret" not in moved.json["webhook"]  # the URL moves, the secret stays (it never leaves)
        sent = admin.post("/api/notifications/test", {"channel": "webhook"})
        assert sent.json == {"ok": True, "detail": "HTTP 200 OK"}
        got = receiver.wait_for(1)[0]
        assert got["refused"] is None and got["json"]["event"] == "test"
        assert got["json"]["subject"] == "[contentnode] Test notification"
        rotated = admin.put("/api/notifications", {"webhook": {"generate_secret": True}}).json["webhook"]
        assert rotated["new_secret"] != generated
        refused = admin.post("/api/notifications/test", {"channel": "webhook"})
    assert refused.json == {"ok": False, "detail": "the webhook answered HTTP 401: {\"error\": \"bad signature\"}"}


def test_an_own_secret_is_write_only(node, admin):
    with WebhookReceiver(SECRET) as receiver:
        answer = admin.put("/api/notifications", {"webhook": {"url": receiver.url, "secret": SECRET}})
        assert answer.json["webhook"] == {"enabled": False, "url": receiver.url, "secret_set": True}
        assert admin.post("/api/notifications/test", {"channel": "webhook"}).json["ok"] is True
    for shown in shown_everywhere(node, admin):
        assert SECRET.encode() not in shown


def test_the_signature_uses_the_nodes_clock(node, admin):
    """A node whose clock is 10 minutes off signs timestamps the receiver refuses as old."""
    with WebhookReceiver(SECRET) as receiver:
        admin.put("/api/notifications", {"webhook": {"url": receiver.url, "secret": SECRET}})
        node.set_clock_offset(-600)
        answer = admin.post("/api/notifications/test", {"channel": "webhook"})
    assert answer.json == {"ok": False,
                           "detail": "the webhook answered HTTP 400: {\"error\": \"timestamp outside the tolerance\"}"}


def test_ntfy_test_send_and_write_only_token(node, admin):
    with NtfyReceiver(token=NTFY_TOKEN) as receiver:
        answer = admin.put("/api/notifications", {"ntfy": {"server": receiver.url, "topic": "edge-alerts",
                                                           "token": NTFY_TOKEN}})
        assert answer.json["ntfy"] == {"enabled": False, "server": receiver.url, "topic": "edge-alerts",
                                       "token_set": True}
        sent = admin.post("/api/notifications/test", {"channel": "ntfy"})
        got = receiver.wait_for(1)[0]
    assert sent.json == {"ok": True, "detail": "sent (id msg1)"}
    assert got["path"] == "/edge-alerts" and got["authorization"] == f"Bearer {NTFY_TOKEN}"
    assert got["title"] == "[contentnode] Test notification" and got["tags"] == "white_check_mark,test"
    for shown in shown_everywhere(node, admin):
        assert NTFY_TOKEN.encode() not in shown
    moved = admin.put("/api/notifications", {"ntfy": {"server": "https://ntfy.example.com"}})
    assert moved.status == 400 and moved.json["error"]["field"] == "ntfy.token"


@pytest.mark.parametrize("body, field", [
    ({"webhook": {"url": "http://169.254.169.254/latest/meta-data"}}, "webhook.url"),
    ({"webhook": {"url": "https://[fe80::1]/hook"}}, "webhook.url"),
    ({"ntfy": {"server": "http://169.254.169.254"}}, "ntfy.server"),
    ({"webhook": {"enabled": True}}, "webhook.url"),  # the form's rules: tests/test_notify_channels.py
])
def test_bad_channel_config_changes_nothing(node, admin, body, field):
    before = read(os.path.join(node.data_dir, "state.json"))
    answer = admin.put("/api/notifications", body)
    assert answer.status == 400 and answer.json["error"]["field"] == field, answer.body
    assert read(os.path.join(node.data_dir, "state.json")) == before


def test_outbound_rules_at_send(node, admin):
    """A target the policy refuses now is refused at send, whenever it was stored."""
    with WebhookReceiver(SECRET) as receiver:
        admin.put("/api/notifications", {"webhook": {"url": receiver.url, "secret": SECRET}})
        assert admin.put("/api/settings", {"allow_private_outbound": False}).status == 200
        refused = admin.post("/api/notifications/test", {"channel": "webhook"})
        assert receiver.deliveries == []
    assert refused.json["ok"] is False and "private or loopback" in refused.json["detail"]
    saved = admin.put("/api/notifications", {"webhook": {"url": "http://127.0.0.1:8080/in"}})
    assert saved.status == 400 and "outbound policy" in saved.json["error"]["message"]
    # a link-local target that arrived in a backup (restore checks the form, not the address)
    assert admin.put("/api/settings", {"allow_private_outbound": True}).status == 200
    backup = admin.post("/api/backup/export", {}).json
    backup["data"]["notifications"]["webhook"]["url"] = "http://169.254.169.254/hook"
    assert admin.post("/api/backup/restore", {"backup": backup}).status == 200
    at_send = admin.post("/api/notifications/test", {"channel": "webhook"})
    assert at_send.json["ok"] is False and "link-local" in at_send.json["detail"]


def test_events_reach_both_channels_through_the_queue(admin):
    with WebhookReceiver(SECRET) as hook, NtfyReceiver() as ntfy:
        admin.put("/api/notifications", {"webhook": {"enabled": True, "url": hook.url, "secret": SECRET},
                                         "ntfy": {"enabled": True, "server": ntfy.url, "topic": "ops"}})
        assert admin.post("/api/users", {"username": "vera", "password": "a-long-pass-phrase-9",
                                         "role": "viewer"}).status == 201
        delivered = hook.wait_for(1)[0]["json"]
        published = ntfy.wait_for(1)[0]
    assert delivered["event"] == "user_created" and delivered["fields"]["username"] == "vera"
    assert delivered["fields"]["by"] == ADMIN_USER and "password" not in json.dumps(delivered["fields"])
    assert published["path"] == "/ops" and published["title"] == "[contentnode] User created: vera"
    assert published["tags"] == "bust_in_silhouette,user_created" and published["priority"] == "3"


def test_backups_carry_the_channel_secrets_only_encrypted(admin):
    admin.put("/api/notifications", {"webhook": {"url": "https://hooks.example.com/in", "secret": SECRET},
                                     "ntfy": {"topic": "ops", "token": NTFY_TOKEN}})
    plain = admin.post("/api/backup/export", {})
    assert SECRET.encode() not in plain.body and NTFY_TOKEN.encode() not in plain.body
    omitted = plain.json["secrets_omitted"]
    assert ["notifications", "webhook", "secret"] in omitted and ["notifications", "ntfy", "token"] in omitted
    sealed = admin.post("/api/backup/export", {"passphrase": "a long passphrase"})
    assert SECRET.encode() not in sealed.body and NTFY_TOKEN.encode() not in sealed.body
    admin.put("/api/notifications", {"webhook": {"secret": None}, "ntfy": {"token": None}})
    # a secret removed since the backup stays removed (docs/API.md, "A restore never rolls a credential back")
    kept = admin.post("/api/backup/restore", {"backup": sealed.json, "passphrase": "a long passphrase"})
    assert kept.status == 200 and sorted(kept.json["kept"]["notification_channels"]) == ["ntfy", "webhook"]
    restored = admin.get("/api/notifications").json
    assert restored["webhook"]["secret_set"] is False and restored["ntfy"]["token_set"] is False
    # the encrypted backup carries them: restore_credentials brings them back
    back = admin.post("/api/backup/restore", {"backup": sealed.json, "passphrase": "a long passphrase",
                                              "restore_credentials": True})
    assert back.status == 200, back.body
    restored = admin.get("/api/notifications").json
    assert restored["webhook"]["secret_set"] is True and restored["ntfy"]["token_set"] is True


@pytest.mark.daemon_process
def test_webhook_over_https_trusting_a_test_ca(tmp_path):
    with WebhookReceiver(SECRET, tls=True) as receiver:
        node = Node(str(tmp_path), env={"SSL_CERT_FILE": receiver.ca_file}).start()
        try:
            admin = node.client()
            assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
            url = receiver.url.replace("127.0.0.1", "localhost") + "/in"
            assert admin.put("/api/notifications", {"webhook": {"url": url, "secret": SECRET}}).status == 200
            answer = admin.post("/api/notifications/test", {"channel": "webhook"})
        finally:
            node.kill()
    assert answer.json == {"ok": True, "detail": "HTTP 200 OK"}
    assert receiver.deliveries[0]["refused"] is None and receiver.deliveries[0]["headers"]["Host"].startswith("localhost")
