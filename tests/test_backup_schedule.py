"""Scheduled backups to a bucket, against the session's SeaweedFS: the schedule and its write-only
passphrase, runs started by the node's (test) clock, retention of this node's own backups, the
stored object sealed, restores from the bucket through the API and offline, and a bucket that
refuses the write (status, one notification per incident through a real SMTP server)."""

import base64
import json
import time
import uuid
import zlib

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from contentnode.clock import parse_rfc3339
from tests.accounts import create_user, logged_in
from tests.inprocess import node_class
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.peers.smtp import SmtpServer

pytestmark = pytest.mark.in_process

DAY = 86400
PASSPHRASE = "a passphrase the operator keeps"


@pytest.fixture
def node(request, tmp_path):
    """A node whose backup job looks at the clock ten times a second."""
    instance = node_class(request)(str(tmp_path), env={"CONTENTNODE_BACKUP_POLL_SECONDS": "0.1"}).start()
    yield instance
    instance.close()


def new_bucket(seaweed) -> str:
    name = "sched-" + uuid.uuid4().hex[:10]
    seaweed.create_bucket(name)
    return name


def target(seaweed, bucket, **overrides) -> dict:
    body = {"endpoint": seaweed.endpoint, "region": seaweed.region, "bucket": bucket,
            "access_key": seaweed.access_key, "secret_key": seaweed.secret_key, "path_style": True}
    return dict(body, **overrides)


def wait_for(check, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout} s for {what}")


def schedule(admin) -> dict:
    answer = admin.get("/api/backup/schedule")
    assert answer.status == 200, answer.body
    return answer.json


def run_by_clock(node, admin, offset: float) -> tuple[float, dict]:
    """Schedule the daily run a minute or two ahead of the node's clock, move the clock just past
    it and wait for that run to end. The steps stay small: the node signs its S3 requests with
    its own clock, and S3 refuses a signature more than 15 minutes off."""
    before = schedule(admin)
    slot = (int(time.time() + offset) // 60 + 2) * 60
    at = time.gmtime(slot)
    moved = admin.put("/api/backup/schedule", {"hour": at.tm_hour, "minute": at.tm_min})
    assert moved.status == 200 and parse_rfc3339(moved.json["next_run_at"]) == slot, moved.body
    offset = slot - time.time() + 1
    node.set_clock_offset(offset)
    after = wait_for(lambda: (s := schedule(admin))["status"]["last_run_at"] != before["status"]["last_run_at"]
                     and not s["status"]["running"] and s, "a scheduled run")
    return offset, after


def open_sealed(document: dict, passphrase: str) -> dict:
    """Decrypt a stored backup by the format docs/API.md describes (scrypt, AES-256-GCM, header as AAD)."""
    header = {k: v for k, v in document.items() if k != "ciphertext"}
    kdf = header["kdf"]
    key = Scrypt(salt=base64.b64decode(kdf["salt"]), length=32, n=kdf["n"], r=kdf["r"], p=kdf["p"]).derive(
        passphrase.encode())
    aad = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    plain = AESGCM(key).decrypt(base64.b64decode(header["cipher"]["nonce"]),
                                base64.b64decode(document["ciphertext"]), aad)
    return json.loads(zlib.decompress(plain))


def test_the_schedule_its_rules_and_the_passphrase_shown_once(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    empty = schedule(admin)
    assert empty["frequency"] == "off" and empty["passphrase_set"] is False and empty["next_run_at"] is None
    assert empty["time_zone"] == "UTC" and empty["keep"] == 7 and empty["prefix"] == "contentnode-backups/"
    assert admin.get("/api/backup/stored").json == {"backups": [], "bucket": None, "prefix": "contentnode-backups/"}
    # a schedule needs a whole target and a passphrase before it may run
    refused = admin.put("/api/backup/schedule", {"frequency": "daily"})
    assert refused.status == 400 and refused.json["error"]["field"] == "endpoint"
    refused = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), frequency="daily"))
    assert refused.status == 400 and refused.json["error"]["field"] == "passphrase"
    for body, field in [({"frequency": "hourly"}, "frequency"), ({"hour": 24}, "hour"), ({"keep": 0}, "keep"),
                        ({"passphrase": "short"}, "passphrase"), ({"prefix": "/abs"}, "prefix"),
                        ({"passphrase": PASSPHRASE, "generate_passphrase": True}, "generate_passphrase"),
                        ({"from_bucket": "nope"}, "from_bucket"), ({"endpoint": "ftp://x"}, "endpoint")]:
        answer = admin.put("/api/backup/schedule", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field, (body, answer.body)
    assert schedule(admin)["revision"] == empty["revision"]  # nothing refused changed anything

    made = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), frequency="weekly", weekday="sunday",
                                                  hour=4, minute=30, keep=3, generate_passphrase=True))
    assert made.status == 200, made.body
    generated = made.json["generated_passphrase"]
    assert len(generated) >= 32 and made.json["passphrase_set"] is True and made.json["secret_key_set"] is True
    assert made.headers["etag"] == f'"{made.json["revision"]}"'
    next_run = time.gmtime(parse_rfc3339(made.json["next_run_at"]))
    assert (next_run.tm_wday, next_run.tm_hour, next_run.tm_min) == (6, 4, 30)
    # write-only from now on: no answer, log line or audit entry holds the passphrase or the secret key
    shown = admin.get("/api/backup/schedule")
    assert generated not in shown.body.decode() and seaweed.secret_key not in shown.body.decode()
    assert "generated_passphrase" not in shown.json
    audit = admin.get("/api/audit?action=backup.schedule").body.decode()
    assert "backup.schedule" in audit and generated not in audit and seaweed.secret_key not in audit
    assert generated not in node.log()
    # If-Match as on every updatable object
    stale = admin.put("/api/backup/schedule", {"keep": 5}, headers={"If-Match": f'"{made.json["revision"] - 1}"'})
    assert stale.status == 412
    fresh = admin.put("/api/backup/schedule", {"keep": 5}, headers={"If-Match": f'"{made.json["revision"]}"'})
    assert fresh.status == 200 and fresh.json["keep"] == 5 and fresh.json["revision"] > made.json["revision"]

    # from_bucket: one of the node's S3 buckets lends its endpoint and credentials; a folder bucket cannot
    content = admin.post("/api/buckets", seaweed.bucket_definition(new_bucket(seaweed))).json
    copied = admin.put("/api/backup/schedule", {"from_bucket": content["id"], "bucket": bucket})
    assert copied.status == 200 and copied.json["bucket"] == bucket and copied.json["endpoint"] == seaweed.endpoint
    folder = admin.post("/api/buckets", {"name": "site", "type": "folder", "path": f"{node.data_dir}/sites/a"})
    assert folder.status == 201, folder.body
    refused = admin.put("/api/backup/schedule", {"from_bucket": folder.json["id"]})
    assert refused.status == 400 and refused.json["error"]["field"] == "from_bucket"
    assert "leave the node" in refused.json["error"]["message"]


def test_only_an_administrator_and_no_token_session_changes_the_schedule_or_restores(node, admin, seaweed):
    create_user(admin, "manager", role="custom", scopes=["users:manage"])
    manager = logged_in(node, "manager")
    assert manager.get("/api/backup/schedule").status == 200
    body = dict(target(seaweed, "any-bucket"), passphrase=PASSPHRASE)
    assert manager.put("/api/backup/schedule", body).status == 403
    assert manager.post("/api/backup/stored/restore", {"key": "k"}).status == 403
    made = admin.post("/api/me/tokens", {"name": "script", "scopes": ["users:manage"], "password": ADMIN_PASSWORD})
    script = node.client()
    assert script.post("/api/login", {"token": made.json["secret"]}).status == 200
    assert script.put("/api/backup/schedule", body).status == 403
    assert script.post("/api/backup/stored/restore", {"key": "k"}).status == 403
    assert schedule(admin)["passphrase_set"] is False


def test_runs_by_the_clock_keep_the_newest_n_of_this_node_only(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    prefix = "nightly/"
    foreign = f"{prefix}contentnode-ffffffffffffffff-20200101T000000Z-abcdef.json"
    seaweed.put_object(bucket, foreign, b"{}", "application/json")
    seaweed.put_object(bucket, f"{prefix}notes.txt", b"not a backup", "text/plain")
    hour = time.gmtime(time.time() + 6 * 3600).tm_hour  # hours away: nothing runs before the clock moves
    made = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), frequency="daily", hour=hour, minute=15,
                                                  keep=2, prefix=prefix, passphrase=PASSPHRASE))
    node.set_clock_offset(-5 * 60)  # room for three runs a minute or two apart within S3's 15 minutes
    assert made.status == 200, made.body
    assert time.gmtime(parse_rfc3339(made.json["next_run_at"])).tm_hour == hour
    time.sleep(0.5)  # five looks at the clock: not due yet
    assert schedule(admin)["status"]["last_run_at"] is None

    offset, keys = -5 * 60.0, []
    for _ in range(3):
        offset, after = run_by_clock(node, admin, offset)
        status = after["status"]
        assert status["last_error"] is None and status["trigger"] == "schedule", status
        keys.append(status["last_key"])
        assert after["next_run_at"] is not None and parse_rfc3339(after["next_run_at"]) - (time.time() + offset) > 23 * 3600
    assert len(set(keys)) == 3 and all(k.startswith(prefix + "contentnode-") for k in keys)
    assert schedule(admin)["status"]["pruned"] == 1

    listed = admin.get("/api/backup/stored")
    assert listed.status == 200 and listed.json["bucket"] == bucket and listed.json["prefix"] == prefix
    rows = listed.json["backups"]
    assert [r["key"] for r in rows if r["own"]] == [keys[2], keys[1]]  # newest first; the oldest went
    assert [r["key"] for r in rows if not r["own"]] == [foreign]      # another node's backup stays
    assert all(r["size"] > 0 and r["created_at"].endswith("Z") for r in rows)
    assert seaweed.get_object(bucket, f"{prefix}notes.txt") == b"not a backup"  # and anything else there
    with pytest.raises(RuntimeError):
        seaweed.get_object(bucket, keys[0])
    audit = admin.get("/api/audit?action=backup.run").json["entries"]
    assert [e["ok"] for e in audit] == [True, True, True]


def test_the_stored_backup_is_sealed_and_restores_from_the_bucket(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    content = admin.post("/api/buckets", seaweed.bucket_definition(new_bucket(seaweed), name="media"))
    assert content.status == 201
    assert admin.post("/api/domains", {"host": "before.example.com"}).status == 201
    made = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), passphrase=PASSPHRASE))
    assert made.status == 200 and made.json["frequency"] == "off" and made.json["next_run_at"] is None
    ran = admin.post("/api/backup/schedule/run")
    assert ran.status == 200, ran.body
    key = ran.json["key"]
    stored = seaweed.get_object(bucket, key)
    assert len(stored) == ran.json["size"]
    text = stored.decode()
    for secret in (PASSPHRASE, seaweed.secret_key, ADMIN_USER, "before.example.com", "media", bucket):
        assert secret not in text, secret
    document = json.loads(stored)
    assert document["kind"] == "encrypted" and document["cipher"]["name"] == "aes-256-gcm"
    sealed = open_sealed(document, PASSPHRASE)
    assert "before.example.com" in sealed["data"]["domains"]
    # the schedule (its passphrase, the target's credentials) and its status are in no backup
    assert "backup_schedule" not in sealed["data"] and "backup_status" not in sealed["data"]
    assert PASSPHRASE not in json.dumps(sealed)

    assert admin.delete("/api/domains/before.example.com").status == 204
    assert admin.post("/api/domains", {"host": "after.example.com"}).status == 201
    bad = admin.post("/api/backup/stored/restore", {"key": "elsewhere/contentnode-aa-20260101T000000Z-abcdef.json"})
    assert bad.status == 400 and bad.json["error"]["field"] == "key"
    missing = admin.post("/api/backup/stored/restore",
                         {"key": made.json["prefix"] + "contentnode-aa-20260101T000000Z-abcdef.json"})
    assert missing.status == 404
    restored = admin.post("/api/backup/stored/restore", {"key": key})
    assert restored.status == 200, restored.body
    assert restored.json["from_bucket"] == key and restored.json["kind"] == "encrypted"
    domains = {d["host"] for d in admin.get("/api/domains").json["domains"]}
    assert domains == {"before.example.com"}
    kept = schedule(admin)  # the node's own schedule and run status survived the restore
    assert kept["passphrase_set"] and kept["bucket"] == bucket and kept["status"]["last_key"] == key
    assert kept["revision"] == made.json["revision"]
    entries = admin.get("/api/audit?action=backup.restore").json["entries"]
    assert entries[0]["detail"]["from_bucket"] == key

    # a passphrase changed since: the older backup no longer opens with the node's
    assert admin.put("/api/backup/schedule", {"passphrase": "another passphrase"}).status == 200
    refused = admin.post("/api/backup/stored/restore", {"key": key})
    assert refused.status == 400 and refused.json["error"]["field"] == "key"
    assert "another one" in refused.json["error"]["message"]


def test_a_stored_object_nested_too_deeply_is_refused_as_no_backup(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    made = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), passphrase=PASSPHRASE))
    assert made.status == 200, made.body
    key = made.json["prefix"] + "contentnode-aa-20260101T000000Z-abcdef.json"
    seaweed.put_object(bucket, key, b"[" * 1200 + b"]" * 1200, "application/json")
    refused = admin.post("/api/backup/stored/restore", {"key": key})
    assert refused.status == 400 and refused.json["error"]["field"] == "key", refused.body
    assert "not a JSON backup" in refused.json["error"]["message"]


def test_list_and_restore_offline(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    assert admin.put("/api/backup/schedule", dict(target(seaweed, bucket), passphrase=PASSPHRASE)).status == 200
    assert admin.post("/api/domains", {"host": "kept.example.com"}).status == 201
    key = admin.post("/api/backup/schedule/run").json["key"]
    assert admin.delete("/api/domains/kept.example.com").status == 204
    node.stop()
    listed = node.cli("backup", "list")
    assert listed.returncode == 0, listed.stderr
    assert "1 backup(s) in " + bucket in listed.stdout and key in listed.stdout
    refused = node.cli("backup", "restore", "--from-bucket", "nightly/other.json")
    assert refused.returncode == 1 and "not the name of a scheduled backup" in refused.stderr
    restored = node.cli("backup", "restore", "--from-bucket", key)
    assert restored.returncode == 0, restored.stderr
    assert "restored an encrypted backup" in restored.stdout
    node.start()
    c = node.client()
    assert c.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    assert [d["host"] for d in c.get("/api/domains").json["domains"]] == ["kept.example.com"]
    assert c.get("/api/backup/schedule").json["passphrase_set"] is True


def email(server) -> dict:
    return {"enabled": True, "host": "127.0.0.1", "port": server.port, "security": "none",
            "from": "node@example.com", "to": ["ops@example.com"]}


def failed_events(node) -> int:
    return node.log().count("event backup_failed")


def test_a_bucket_that_refuses_the_write_notifies_once_per_incident(node, admin, seaweed):
    bucket = new_bucket(seaweed)
    readonly = target(seaweed, bucket, access_key=seaweed.readonly_access_key,
                      secret_key=seaweed.readonly_secret_key)
    hour = time.gmtime(time.time() + 12 * 3600).tm_hour
    node.set_clock_offset(-10 * 60)  # the retry 15 min on stays within S3's 15-minute signature window
    with SmtpServer("none") as server:
        assert admin.put("/api/notifications", {"email": email(server)}).status == 200
        assert admin.put("/api/backup/schedule", dict(readonly, frequency="daily", hour=hour,
                                                      passphrase=PASSPHRASE)).status == 200
        refused = admin.post("/api/backup/schedule/run")
        assert refused.status == 502 and refused.json["error"]["code"] == "backup_bucket_failed", refused.body
        status = schedule(admin)["status"]
        assert status["failures"] == 1 and status["last_error"]["code"] == "access_denied", status
        assert status["last_ok_at"] is None and status["trigger"] == "manual"
        mail = server.wait_for(1)[0]["message"]
        assert mail["Subject"] == "[contentnode] Scheduled backup failed"
        assert bucket in mail.get_content() and PASSPHRASE not in mail.get_content()
        # the retry comes 15 minutes later, long before the next slot, and fails again: shown, not sent again
        retry_at = parse_rfc3339(schedule(admin)["next_run_at"])
        assert 14 * 60 < retry_at - (time.time() - 10 * 60) <= 15 * 60
        node.set_clock_offset(retry_at - time.time() + 2)
        wait_for(lambda: schedule(admin)["status"]["failures"] == 2, "the retry")
        assert schedule(admin)["status"]["trigger"] == "schedule"
        assert failed_events(node) == 1
        assert len(server.inbox.messages) == 1
        assert seaweed.requests("PUT", bucket) and not seaweed.requests("DELETE", bucket)  # nothing pruned

        # credentials that may write end the incident; the next failure (the bucket unreachable) is a new one
        fixed = admin.put("/api/backup/schedule", {"access_key": seaweed.access_key, "secret_key": seaweed.secret_key})
        assert fixed.status == 200
        assert admin.post("/api/backup/schedule/run").status == 200
        status = schedule(admin)["status"]
        assert status["failures"] == 0 and status["last_error"] is None and status["last_ok_at"] is not None
        with seaweed.stopped():
            down = admin.post("/api/backup/schedule/run")
        assert down.status == 502 and "connect" in down.json["error"]["message"]
        assert schedule(admin)["status"]["last_error"]["code"] == "connect"
        server.wait_for(2)
        assert failed_events(node) == 2
    assert admin.get("/api/audit?action=backup.run").json["entries"][0]["ok"] is False


def test_a_backup_restored_by_hand_keeps_the_nodes_schedule(node, admin, seaweed):
    """A restore (any kind) never takes the schedule from the backup: the node keeps its own."""
    bucket = new_bucket(seaweed)
    exported = admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json
    made = admin.put("/api/backup/schedule", dict(target(seaweed, bucket), passphrase=PASSPHRASE))
    crafted = admin.post("/api/backup/export", {}).json
    assert "backup_schedule" not in crafted["data"] and "backup_status" not in crafted["data"]
    crafted["data"]["backup_schedule"] = {"frequency": "daily", "endpoint": "http://203.0.113.9"}
    for body in ({"backup": exported, "passphrase": PASSPHRASE}, {"backup": crafted}):
        restored = admin.post("/api/backup/restore", body)
        assert restored.status == 200, restored.body
        kept = schedule(admin)
        assert kept["bucket"] == bucket and kept["endpoint"] == seaweed.endpoint and kept["passphrase_set"]
        assert kept["revision"] == made.json["revision"]


@pytest.mark.parametrize("endpoint, expected", [(None, True), ("https://s3.example.net", False)])
def test_a_target_without_path_style_gets_the_bucket_default(admin, seaweed, endpoint, expected):
    """path_style left out defaults as for POST /api/buckets: true for an address or localhost, false for a
    host name (it answered 500, a KeyError, before)."""
    body = target(seaweed, new_bucket(seaweed))
    del body["path_style"]
    if endpoint:
        body["endpoint"] = endpoint
    answer = admin.put("/api/backup/schedule", body)
    assert answer.status == 200 and answer.json["path_style"] is expected, answer.body
    assert schedule(admin)["path_style"] is expected
