"""Backups over HTTP and offline: a plain export free of secrets, an encrypted
round trip onto a fresh node (users log in, buckets still authenticate against
a real SeaweedFS, certificates come along), and every bad restore leaving the
state file unchanged."""

import json
import os
import time

import pytest

from tests import certgen
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App and SeaweedFS; restarts and offline commands: daemons

PASSPHRASE = "a long backup passphrase"
SMTP_PASSWORD = "smtp-Pa55word-x"
TOKEN = "4242:" + "Q" * 35
VIEWER_PASSWORD = "viewer password 123!"


def fresh_node(node, tmp_path):
    """A second node of the same kind as `node` (in-process or a daemon process)."""
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    return type(node)(str(workdir))


def read(path):
    with open(path, "rb") as f:
        return f.read()


def state(node):
    return read(os.path.join(node.data_dir, "state.json"))


def pre_restore_files(node):
    return sorted(n for n in os.listdir(node.data_dir) if n.startswith("pre-restore-"))


def populate(admin, seaweed, bucket="backup-src"):
    """A node with a user, a bucket, notification secrets, a link key and a certificate."""
    seaweed.create_bucket(bucket)
    seaweed.put_object(bucket, "hello.txt", b"hello", "text/plain")
    created = admin.post("/api/buckets", seaweed.bucket_definition(bucket))
    assert created.status == 201, created.json
    assert admin.post("/api/users", {"username": "viewer1", "password": VIEWER_PASSWORD,
                                     "role": "viewer"}).status == 201
    assert admin.put("/api/notifications", {"email": {"host": "mail.example.com", "username": "m",
                                                      "password": SMTP_PASSWORD},
                                            "telegram": {"bot_token": TOKEN, "chat_id": "1"}}).status == 200
    assert admin.post("/api/links/rotate").status == 200
    leaf, key = certgen.make_leaf(["www.example.com"])
    assert admin.post("/api/domains", {"host": "www.example.com"}).status == 201
    assert admin.post("/api/certs/upload", {"host": "www.example.com", "cert_pem": certgen.cert_pem(leaf),
                                            "key_pem": certgen.key_pem(key)}).status == 200
    return created.json["id"]


def secrets_of(node, seaweed):
    """Every secret value the node holds, read from its own files."""
    doc = json.loads(state(node))
    values = [seaweed.secret_key, SMTP_PASSWORD, TOKEN, ADMIN_PASSWORD, VIEWER_PASSWORD, doc["node"]["secret"],
              "BEGIN PRIVATE KEY"]
    values += [u["password_hash"] for u in doc["users"].values()]
    values += [k["secret"] for k in doc["links"]["keys"].values()]
    return values


def test_plain_export_is_free_of_secrets(node, admin, seaweed):
    bucket_id = populate(admin, seaweed)
    answer = admin.post("/api/backup/export", {})
    assert answer.status == 200 and answer.headers["content-disposition"].startswith("attachment;")
    assert answer.json["kind"] == "plain" and answer.json["data"]["buckets"][bucket_id]["bucket"] == "backup-src"
    assert "viewer1" in answer.body.decode()
    for secret in secrets_of(node, seaweed):
        assert secret not in answer.body.decode(), secret[:12]
    assert ["buckets", bucket_id, "secret_key"] in answer.json["secrets_omitted"]


@pytest.mark.daemon_process
def test_encrypted_round_trip_onto_a_fresh_node(node, admin, seaweed, tmp_path):
    bucket_id = populate(admin, seaweed, "backup-trip")
    sealed = admin.post("/api/backup/export", {"passphrase": PASSPHRASE})
    assert sealed.status == 200 and sealed.json["kind"] == "encrypted"
    for secret in secrets_of(node, seaweed) + ["viewer1", "backup-trip"]:
        assert secret not in sealed.body.decode()

    fresh = fresh_node(node, tmp_path).start()
    try:
        other = fresh.client()
        assert other.post("/api/setup", {"username": "someone", "password": ADMIN_PASSWORD + "!"}).status == 201
        # by default a restore keeps this node's accounts (it never revives credentials): "someone" stays,
        # the backup's users are named as left out
        kept = other.post("/api/backup/restore", {"backup": sealed.json, "passphrase": PASSPHRASE})
        assert kept.status == 200 and kept.json["kept"]["users_deleted"] == [ADMIN_USER, "viewer1"], kept.body
        assert kept.json["kept"]["users_created"] == ["someone"]
        assert fresh.client().login("viewer1", VIEWER_PASSWORD).status == 401
        # moving a node: the backup's accounts as they were, asked for
        restored = other.post("/api/backup/restore", {"backup": sealed.json, "passphrase": PASSPHRASE,
                                                      "restore_credentials": True})
        assert restored.status == 200 and restored.json["kind"] == "encrypted" and restored.json["restored"]
        assert pre_restore_files(fresh) == [kept.json["pre_restore"], restored.json["pre_restore"]]
        c = fresh.client()
        assert c.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
        assert fresh.client().login("viewer1", VIEWER_PASSWORD).status == 200
        assert fresh.client().login("someone", ADMIN_PASSWORD + "!").status == 401
        check = c.post("/api/buckets/check", {"id": bucket_id})
        assert check.status == 200 and check.json["ok"] is True, check.json
        assert os.path.exists(os.path.join(fresh.data_dir, "certs", "www.example.com.pem"))
        audit = read(os.path.join(fresh.data_dir, "audit.jsonl")).decode()
        assert '"backup.restore"' in audit and PASSPHRASE not in audit
        # the node keeps working after a restart on the restored state
        fresh.restart()
        assert fresh.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    finally:
        fresh.close()


def _tampered(doc):
    doc = json.loads(json.dumps(doc))
    doc["ciphertext"] = ("A" if doc["ciphertext"][0] != "A" else "B") + doc["ciphertext"][1:]
    return doc


@pytest.mark.parametrize("make,field,message", [
    (lambda s, p: {"backup": s, "passphrase": "not the passphrase"}, "passphrase", "wrong passphrase"),
    (lambda s, p: {"backup": _tampered(s), "passphrase": PASSPHRASE}, "passphrase", "altered"),
    (lambda s, p: {"backup": s}, "passphrase", "passphrase is required"),
    (lambda s, p: {"backup": dict(s, version=99), "passphrase": PASSPHRASE}, "backup", "newer contentnode"),
    (lambda s, p: {"backup": dict(s, schema=99), "passphrase": PASSPHRASE}, "backup", "newer contentnode"),
    (lambda s, p: {"backup": dict(s, format="zip"), "passphrase": PASSPHRASE}, "backup", "not a contentnode"),
    (lambda s, p: {"backup": [1, 2]}, "backup", "must be a JSON object"),
    (lambda s, p: {"backup": p, "passphrase": PASSPHRASE}, "passphrase", "takes no passphrase"),
    (lambda s, p: {"backup": dict(p, data={"users": []}, secrets_omitted=[])}, "backup", "wrong type"),
    (lambda s, p: {"backup": s, "extra": 1}, "extra", "unknown field"),
])
def test_bad_restores_change_nothing(node, admin, make, field, message):
    sealed = admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json
    plain = admin.post("/api/backup/export", {}).json
    before = state(node)
    answer = admin.post("/api/backup/restore", make(sealed, plain))
    assert answer.status == 400 and answer.error_code == "invalid"
    assert answer.json["error"]["field"] == field and message in answer.json["error"]["message"]
    assert state(node) == before and pre_restore_files(node) == []


def test_export_passphrase_rules(admin):
    for body, field in (({"passphrase": "short"}, "passphrase"), ({"passphrase": 12345678}, "passphrase"),
                        ({"password": PASSPHRASE}, "password")):
        answer = admin.post("/api/backup/export", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field


def test_plain_restore_keeps_users_and_secrets(node, admin, seaweed):
    bucket_id = populate(admin, seaweed, "backup-plain")
    admin.put("/api/settings", {"node_name": "before"})
    plain = admin.post("/api/backup/export", {}).json
    admin.put("/api/settings", {"node_name": "after"})
    assert admin.post("/api/users", {"username": "later", "password": VIEWER_PASSWORD, "role": "viewer"}).status == 201
    answer = admin.post("/api/backup/restore", {"backup": plain})
    assert answer.status == 200 and answer.json["kind"] == "plain"
    assert admin.get("/api/settings").json["node_name"] == "before"
    assert node.client().login("later", VIEWER_PASSWORD).status == 200  # users are the node's own
    assert admin.post("/api/buckets/check", {"id": bucket_id}).json["ok"] is True  # secret kept
    assert admin.get("/api/notifications").json["telegram"]["bot_token_set"] is True


def test_plain_restore_of_a_bucket_this_node_never_had_is_refused(node, admin, seaweed, tmp_path):
    populate(admin, seaweed, "backup-foreign")
    plain = admin.post("/api/backup/export", {}).json
    fresh = fresh_node(node, tmp_path).start()
    try:
        c = fresh.client()
        c.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        before = state(fresh)
        answer = c.post("/api/backup/restore", {"backup": plain})
        assert answer.status == 400 and "/secret_key" in \
            answer.json["error"]["message"]
        assert state(fresh) == before
    finally:
        fresh.close()


def test_backup_needs_users_manage(node, admin):
    admin.post("/api/users", {"username": "op1", "password": VIEWER_PASSWORD, "role": "operator"})
    operator = node.client()
    assert operator.login("op1", VIEWER_PASSWORD).status == 200
    for path, body in (("/api/backup/export", {}), ("/api/backup/restore", {"backup": {}})):
        answer = operator.post(path, body)
        assert answer.status == 403 and answer.error_code == "forbidden"
    assert node.client().post("/api/backup/export", {}).status == 401


def test_a_manager_who_is_not_an_administrator_cannot_escalate_through_backups(node, admin):
    """users:manage without the other scopes: a plain export (no secret) yes, an encrypted export
    (every secret) or a restore (users, settings, buckets) no: either would be admin power."""
    admin.put("/api/notifications", {"email": {"host": "mail.example.com", "username": "m",
                                               "password": SMTP_PASSWORD}})
    created = admin.post("/api/users", {"username": "pat", "password": VIEWER_PASSWORD, "role": "custom",
                                        "scopes": ["users:manage"]})
    assert created.status == 201, created.body
    pat = node.client()
    assert pat.login("pat", VIEWER_PASSWORD).status == 200
    plain = pat.post("/api/backup/export", {})
    assert plain.status == 200 and plain.json["kind"] == "plain" and SMTP_PASSWORD.encode() not in plain.body
    sealed = pat.post("/api/backup/export", {"passphrase": PASSPHRASE})
    assert sealed.status == 403 and sealed.error_code == "forbidden", sealed.body
    # a crafted backup making pat an administrator: refused, nothing changes
    document = admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json
    before = state(node)
    answer = pat.post("/api/backup/restore", {"backup": document, "passphrase": PASSPHRASE})
    assert answer.status == 403 and answer.error_code == "forbidden", answer.body
    answer = pat.post("/api/backup/restore", {"backup": plain.json})
    assert answer.status == 403 and answer.error_code == "forbidden", answer.body
    assert state(node) == before and pre_restore_files(node) == []
    assert admin.post("/api/backup/restore", {"backup": plain.json}).status == 200


@pytest.mark.parametrize("section,value", [
    ("domains", {"x.example.com": "not a record"}),
    ("domains", {"x.example.com": {"host": "x.example.com", "status": "pending", "redirect": {"to": "x", "code": 301}}}),
    ("rules", {"r1": {"id": "r1", "domain": "nowhere.example", "path": "/", "bucket": "b", "prefix": ""}}),
    ("settings", {"node_name": 5}),
    ("policy", {"two_factor": "sometimes"}),
    ("notifications", {"email": {"port": "x"}}),
    ("https", {"enabled": "yes"}),
])
def test_a_restore_of_records_that_cannot_work_changes_nothing(node, admin, section, value):
    """A hand-edited backup must not brick the node: refused whole, before anything is written."""
    plain = admin.post("/api/backup/export", {}).json
    plain["data"][section] = value
    before = state(node)
    answer = admin.post("/api/backup/restore", {"backup": plain})
    assert answer.status == 400 and answer.json["error"]["field"] == "backup", answer.body
    assert f"the backup's {section} cannot be restored" in answer.json["error"]["message"]
    assert state(node) == before and pre_restore_files(node) == []
    assert admin.get("/api/domains").status == 200 and admin.get("/api/panel").status == 200
    assert node.client("public", host="x.example.com").get("/").status == 404


def test_an_encrypted_backup_without_an_administrator_is_refused(node, admin):
    """Restored, it would leave first-time setup open to anyone who reaches the admin port."""
    from contentnode.core import backup

    doc = json.loads(state(node))
    for user in doc["users"].values():
        user["role"] = "viewer"
    document = backup.export_encrypted(doc, {}, PASSPHRASE, "crafted", time.time())
    before = state(node)
    answer = admin.post("/api/backup/restore", {"backup": document, "passphrase": PASSPHRASE})
    assert answer.status == 400 and "no enabled administrator" in answer.json["error"]["message"], answer.body
    assert state(node) == before
    assert node.client().get("/api/session").json["setup_required"] is False


@pytest.mark.daemon_process
def test_offline_export_and_restore(node, admin, tmp_path):
    admin.put("/api/settings", {"node_name": "offline-src"})
    passfile = tmp_path / "pass"
    passfile.write_text(PASSPHRASE + "\n")
    target = str(tmp_path / "node.backup.json")
    running = node.cli("backup", "export", target, "--passphrase-file", str(passfile))
    assert running.returncode == 1 and "in use" in running.stderr  # never beside a running daemon
    node.stop()
    done = node.cli("backup", "export", target, "--passphrase-file", str(passfile))
    assert done.returncode == 0, done.stderr
    assert json.loads(read(target))["kind"] == "encrypted"

    fresh = fresh_node(node, tmp_path)
    wrong = tmp_path / "wrong"
    wrong.write_text("not the passphrase")
    refused = fresh.cli("backup", "restore", target, "--passphrase-file", str(wrong))
    assert refused.returncode == 1 and "wrong passphrase" in refused.stderr
    left_out = fresh.cli("backup", "restore", target, "--passphrase-file", str(passfile))
    assert left_out.returncode == 1 and "no enabled administrator" in left_out.stderr
    assert "--restore-credentials" in left_out.stderr  # the node never had the backup's accounts: it says how
    restored = fresh.cli("backup", "restore", target, "--passphrase-file", str(passfile), "--restore-credentials")
    assert restored.returncode == 0, restored.stderr
    fresh.start()
    try:
        c = fresh.client()
        assert c.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
        assert c.get("/api/settings").json["node_name"] == "offline-src"
    finally:
        fresh.close()


def test_restores_in_one_second_keep_every_pre_restore_snapshot(node, admin):
    plain = admin.post("/api/backup/export", {}).json
    names = []
    for _ in range(4):
        answer = admin.post("/api/backup/restore", {"backup": plain})
        assert answer.status == 200, answer.body
        names.append(answer.json["pre_restore"])
    assert len(set(names)) == 4
    assert pre_restore_files(node) == sorted(names) == names  # unique, and sorted oldest first


@pytest.mark.parametrize("where,value", [
    (("created_at",), 1e300),
    (("last_login_at",), -5),
    (("password_changed_at",), "yesterday"),
    (("totp",), {"enabled": True, "secret": "A" * 32, "last_step": 1e300, "recovery": []}),
    (("totp",), {"enabled": True, "secret": "A" * 32, "last_step": 1, "recovery": [5, None]}),
])
def test_an_encrypted_backup_with_a_user_field_out_of_range_is_refused(node, admin, where, value):
    """A user created_at of 1e300 made /api/session, /api/users and every login answer 500 after a restore."""
    from contentnode.core import backup

    doc = json.loads(state(node))
    for user in doc["users"].values():
        user[where[0]] = value
    document = backup.export_encrypted(doc, {}, PASSPHRASE, "crafted", time.time())
    before = state(node)
    answer = admin.post("/api/backup/restore", {"backup": document, "passphrase": PASSPHRASE})
    assert answer.status == 400 and answer.json["error"]["code"] == "invalid", answer.body
    assert answer.json["error"]["field"] == "backup" and where[0].split("_")[0] in answer.json["error"]["message"]
    assert state(node) == before and pre_restore_files(node) == []
    assert node.client().get("/api/session").status == 200
    assert admin.get("/api/users").status == 200 and admin.get("/api/me").status == 200


def test_a_plain_backup_with_a_link_key_time_or_a_multi_line_name_is_refused(node, admin):
    plain = admin.post("/api/backup/export", {}).json
    for section, value in (("settings", {"node_name": "edge\r\nBcc: someone"}),
                           ("update_status", {"checked_at": "0001-01-01T00:00:00+01:00"})):
        crafted = json.loads(json.dumps(plain))
        crafted["data"][section] = value
        before = state(node)
        answer = admin.post("/api/backup/restore", {"backup": crafted})
        assert answer.status == 400 and f"the backup's {section} cannot" in answer.json["error"]["message"], answer.body
        assert state(node) == before
    assert node.client().get("/api/session").status == 200
