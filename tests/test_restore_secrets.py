"""A restore never rolls a credential back: the node's other secrets.

Beside accounts and tokens (tests/test_restore_credentials.py) a backup
carries link signing keys, notification channel secrets, S3 bucket secret
keys and certificate private keys. Restoring a backup revived a link key rotated out since, a
webhook secret, channel token or S3 secret key replaced since (perhaps
because it leaked), and a certificate re-issued since. Now the node keeps its current ones, the
answer's `kept` names them, and `restore_credentials: true` brings the
backup's back as they were.
"""

import os
import threading

import pytest

from tests.accounts import audit_lines
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.peers.telegram import FakeTelegram
from tests.peers.webhook import NtfyReceiver, WebhookReceiver

pytestmark = pytest.mark.in_process

PASSPHRASE = "a long backup passphrase"


def _export(admin):
    sealed = admin.post("/api/backup/export", {"passphrase": PASSPHRASE})
    assert sealed.status == 200, sealed.body
    return sealed.json


def _restore(admin, sealed, **extra):
    restored = admin.post("/api/backup/restore", dict(extra, backup=sealed, passphrase=PASSPHRASE))
    assert restored.status == 200, restored.body
    return restored.json


def _link_keys(admin):
    return [(k["kid"], k["current"]) for k in admin.get("/api/links/keys").json["keys"]]


# --- link signing keys ------------------------------------------------------

def test_a_restore_keeps_the_current_link_keys(admin):
    key_a = admin.post("/api/links/rotate", {}).json["kid"]
    sealed = _export(admin)
    key_b = admin.post("/api/links/rotate", {"grace_seconds": 0}).json["kid"]  # A retired at once
    answer = _restore(admin, sealed)
    assert _link_keys(admin) == [(key_b, True)]
    assert answer["kept"]["link_keys_retired"] == [key_a]
    assert answer["kept"]["link_keys_created"] == [key_b]


def test_a_key_in_its_grace_period_stays_in_it(admin):
    key_a = admin.post("/api/links/rotate", {}).json["kid"]
    sealed = _export(admin)
    key_b = admin.post("/api/links/rotate", {"grace_seconds": 3600}).json["kid"]
    answer = _restore(admin, sealed)
    assert sorted(_link_keys(admin)) == sorted([(key_a, False), (key_b, True)])
    assert answer["kept"]["link_keys_retired"] == [] and answer["kept"]["link_keys_created"] == [key_b]


def test_restore_credentials_brings_the_backups_link_keys_back(admin):
    key_a = admin.post("/api/links/rotate", {}).json["kid"]
    sealed = _export(admin)
    admin.post("/api/links/rotate", {"grace_seconds": 0})
    answer = _restore(admin, sealed, restore_credentials=True)
    assert _link_keys(admin) == [(key_a, True)]
    assert all(value == [] for value in answer["kept"].values())


def test_a_rotation_during_a_restore_is_never_overwritten(admin, monkeypatch):
    """The restore decides what to keep and swaps under one hold of the store: a rotation
    arriving while it decides waits and lands on top (it was read before, then overwritten)."""
    from contentnode.auth import restored_secrets

    admin.post("/api/links/rotate", {})
    sealed = _export(admin)
    deciding, go_on = threading.Event(), threading.Event()
    keep_current = restored_secrets.keep_current

    def slow_keep_current(*args):
        kept = keep_current(*args)
        deciding.set()
        go_on.wait(10)
        return kept

    monkeypatch.setattr(restored_secrets, "keep_current", slow_keep_current)
    restore = threading.Thread(target=_restore, args=(admin, sealed))
    restore.start()
    assert deciding.wait(10)
    rotated = {}
    rotation = threading.Thread(target=lambda: rotated.update(admin.post("/api/links/rotate", {"grace_seconds": 0}).json))
    rotation.start()
    rotation.join(0.5)
    go_on.set()
    restore.join(10)
    rotation.join(10)
    assert _link_keys(admin) == [(rotated["kid"], True)]   # the rotation is the last word


# --- notification channel secrets --------------------------------------------

WEBHOOK_OLD, WEBHOOK_NEW = "whk-old-" + "a" * 24, "whk-new-" + "b" * 24
BOT_OLD, BOT_NEW = "4242:" + "O" * 35, "4242:" + "N" * 35
NTFY_OLD, NTFY_NEW = "tk_old_" + "c" * 20, "tk_new_" + "d" * 20


def test_a_restore_keeps_the_current_webhook_secret(node, admin):
    with WebhookReceiver(WEBHOOK_OLD) as receiver:
        admin.put("/api/notifications", {"webhook": {"url": receiver.url + "/in", "secret": WEBHOOK_OLD}})
        sealed = _export(admin)
        assert admin.put("/api/notifications", {"webhook": {"secret": WEBHOOK_NEW}}).status == 200
        receiver.secret = WEBHOOK_NEW  # the receiver was told the new one; the old one leaked
        answer = _restore(admin, sealed)
        sent = admin.post("/api/notifications/test", {"channel": "webhook"})
        assert sent.json == {"ok": True, "detail": "HTTP 200 OK"}
        assert answer["kept"]["notification_channels"] == ["webhook"]
        entry = [e for e in audit_lines(node) if e["action"] == "backup.restore"][-1]
        assert entry["detail"]["kept"] == answer["kept"]  # named in the audit too, never the secret itself
        assert WEBHOOK_OLD not in str(entry) and WEBHOOK_NEW not in str(entry)
        _restore(admin, sealed, restore_credentials=True)
        refused = admin.post("/api/notifications/test", {"channel": "webhook"})
    assert refused.json["ok"] is False and "bad signature" in refused.json["detail"]


def test_a_restore_keeps_the_current_telegram_token(admin):
    with FakeTelegram([BOT_OLD, BOT_NEW], ["42"]) as telegram:
        admin.put("/api/notifications", {"telegram": {"bot_token": BOT_OLD, "chat_id": "42",
                                                      "api_url": telegram.url}})
        sealed = _export(admin)
        assert admin.put("/api/notifications", {"telegram": {"bot_token": BOT_NEW}}).status == 200
        telegram.tokens.discard(BOT_OLD)  # revoked at @BotFather
        answer = _restore(admin, sealed)
        assert admin.post("/api/notifications/test", {"channel": "telegram"}).json["ok"] is True
        assert telegram.messages[-1]["token"] == BOT_NEW
    assert answer["kept"]["notification_channels"] == ["telegram"]


def test_a_restore_keeps_the_current_ntfy_token(admin):
    with NtfyReceiver(token=NTFY_OLD) as ntfy:
        admin.put("/api/notifications", {"ntfy": {"server": ntfy.url, "topic": "ops", "token": NTFY_OLD}})
        sealed = _export(admin)
        assert admin.put("/api/notifications", {"ntfy": {"token": NTFY_NEW}}).status == 200
        ntfy.token = NTFY_NEW
        answer = _restore(admin, sealed)
        assert admin.post("/api/notifications/test", {"channel": "ntfy"}).json["ok"] is True
        assert ntfy.deliveries[-1]["authorization"] == f"Bearer {NTFY_NEW}"
    assert answer["kept"]["notification_channels"] == ["ntfy"]


def test_a_plain_backup_cannot_send_the_nodes_token_to_another_server(admin):
    """A plain backup is editable JSON: its channel pointed elsewhere must not get the node's token."""
    with NtfyReceiver(token=NTFY_NEW) as ours, NtfyReceiver() as theirs:
        admin.put("/api/notifications", {"ntfy": {"server": ours.url, "topic": "ops", "token": NTFY_NEW}})
        plain = admin.post("/api/backup/export", {}).json
        plain["data"]["notifications"]["ntfy"]["server"] = theirs.url
        restored = admin.post("/api/backup/restore", {"backup": plain})
        assert restored.status == 200, restored.body
        assert admin.post("/api/notifications/test", {"channel": "ntfy"}).json["ok"] is True
        assert theirs.deliveries == [] and ours.deliveries[-1]["authorization"] == f"Bearer {NTFY_NEW}"
    assert restored.json["kept"]["notification_channels"] == ["ntfy"]


def test_unchanged_secrets_are_restored_with_their_channel(admin):
    with WebhookReceiver(WEBHOOK_OLD) as receiver:
        admin.put("/api/notifications", {"webhook": {"url": receiver.url + "/in", "secret": WEBHOOK_OLD}})
        sealed = _export(admin)
        admin.put("/api/notifications", {"webhook": {"enabled": True}})
        answer = _restore(admin, sealed)
        assert admin.get("/api/notifications").json["webhook"]["enabled"] is False  # configuration: the backup's
        assert admin.post("/api/notifications/test", {"channel": "webhook"}).json["ok"] is True
    assert answer["kept"]["notification_channels"] == []


# --- S3 bucket credentials -----------------------------------------------------

def test_a_restore_keeps_the_current_bucket_credentials(admin, seaweed):
    """The backup's secret key was replaced since (and deactivated at the provider: here, a key
    SeaweedFS never accepted); restoring it would stop the bucket."""
    seaweed.create_bucket("restore-kept")
    body = seaweed.bucket_definition("restore-kept", secret_key="deactivated-" + "x" * 20)
    bucket_id = admin.post("/api/buckets", body).json["id"]
    sealed = _export(admin)
    assert admin.put(f"/api/buckets/{bucket_id}", {"secret_key": seaweed.secret_key}).status == 200
    answer = _restore(admin, sealed)
    assert admin.post("/api/buckets/check", {"id": bucket_id}).json["ok"] is True
    assert answer["kept"]["bucket_credentials"] == [bucket_id]
    _restore(admin, sealed, restore_credentials=True)
    refused = admin.post("/api/buckets/check", {"id": bucket_id}).json
    assert refused["ok"] is False and refused["steps"][-1]["code"] == "credentials_refused"


# --- certificates --------------------------------------------------------------

KEPT_HOST, BACKUP_ONLY_HOST = "shop.example.com", "old.example.com"


@pytest.fixture(scope="module")
def ca():
    return make_ca()


def _upload(admin, ca, host):
    cert, key = make_leaf([host], ca[0], ca[1])
    answer = admin.post("/api/certs/upload", {"host": host, "cert_pem": cert_pem(cert) + cert_pem(ca[0]),
                                              "key_pem": key_pem(key)})
    assert answer.status == 200, answer.body
    return answer.json["fingerprint"], key_pem(key)


def _stored(node, host):
    with open(os.path.join(node.data_dir, "certs", f"{host}.pem")) as f:
        return f.read()


def test_a_restore_keeps_the_current_certificate_of_a_host_it_keeps(node, admin, ca):
    for host in (KEPT_HOST, BACKUP_ONLY_HOST):
        assert admin.post("/api/domains", {"host": host}).status == 201
    _upload(admin, ca, KEPT_HOST)
    _, old_key = _upload(admin, ca, BACKUP_ONLY_HOST)
    sealed = _export(admin)
    reissued, new_key = _upload(admin, ca, KEPT_HOST)  # re-issued: the old key may have leaked
    assert admin.delete(f"/api/domains/{BACKUP_ONLY_HOST}").status == 204
    answer = _restore(admin, sealed)
    assert admin.get(f"/api/domains/{KEPT_HOST}").json["certificate"]["fingerprint"] == reissued
    assert _stored(node, KEPT_HOST).startswith(new_key)
    assert _stored(node, BACKUP_ONLY_HOST).startswith(old_key)  # only in the backup: the backup's
    assert admin.get(f"/api/domains/{BACKUP_ONLY_HOST}").json["certificate"] is not None
    assert answer["kept"]["certificates"] == [KEPT_HOST]


def test_restore_credentials_brings_the_backups_certificate_back(node, admin, ca):
    assert admin.post("/api/domains", {"host": KEPT_HOST}).status == 201
    first, first_key = _upload(admin, ca, KEPT_HOST)
    sealed = _export(admin)
    _upload(admin, ca, KEPT_HOST)
    answer = _restore(admin, sealed, restore_credentials=True)
    assert admin.get(f"/api/domains/{KEPT_HOST}").json["certificate"]["fingerprint"] == first
    assert _stored(node, KEPT_HOST).startswith(first_key)
    assert answer["kept"]["certificates"] == []


def test_a_plain_restore_keeps_the_summary_of_the_certificate_the_node_serves(node, admin, ca):
    """A plain backup carries no certs/ file, so the node's files stay; the summaries came from the
    backup and named a certificate the node no longer served."""
    assert admin.post("/api/domains", {"host": KEPT_HOST}).status == 201
    _upload(admin, ca, KEPT_HOST)
    plain = admin.post("/api/backup/export", {})
    assert plain.status == 200, plain.body
    reissued, new_key = _upload(admin, ca, KEPT_HOST)
    answer = admin.post("/api/backup/restore", {"backup": plain.json})
    assert answer.status == 200, answer.body
    assert _stored(node, KEPT_HOST).startswith(new_key)
    assert admin.get(f"/api/domains/{KEPT_HOST}").json["certificate"]["fingerprint"] == reissued
    assert answer.json["kept"]["certificates"] == [KEPT_HOST]
