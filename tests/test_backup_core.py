"""Backup core: plain export without secrets, encrypted round trip, and every
kind of bad backup refused before anything changes."""

import base64
import json
import os

import pytest

from contentnode import store
from contentnode.core import backup

PASS = "correct horse battery"
NOW = 1_700_000_000.0
SECTIONS = {"buckets": {}}  # the schema slice these tests need: {name: default}


def node_doc():
    return {
        "schema": store.SCHEMA_VERSION,
        "users": {"u1": {"id": "u1", "username": "root", "role": "admin",
                         "password_hash": "$argon2id$HASH", "totp": {"enabled": True, "secret": "TOTPSECRET"}}},
        "buckets": {"b1": {"id": "b1", "name": "media", "access_key": "AK", "secret_key": "SK-b1"}},
        "notifications": {"telegram": {"bot_token": "1:TOKEN", "chat_id": "42"}, "email": {"password": None}},
        "node": {"id": "n1", "secret": "NODESECRET"},
        "rules": {"r1": {"id": "r1", "domain": "a.example", "path": "/"}},
    }


def test_plain_export_has_no_secret_and_lists_omissions():
    exported = backup.export_plain(node_doc(), "edge-1", NOW)
    text = json.dumps(exported)
    for secret in ("HASH", "TOTPSECRET", "SK-b1", "1:TOKEN", "NODESECRET"):
        assert secret not in text
    assert exported["kind"] == "plain" and exported["node"] == "edge-1"
    assert ["buckets", "b1", "secret_key"] in exported["secrets_omitted"]
    assert exported["data"]["buckets"]["b1"]["access_key"] == "AK"
    assert exported["data"]["rules"]["r1"]["domain"] == "a.example"
    assert exported["data"]["notifications"]["email"] == {"password": None}  # nothing secret in a null


def test_plain_restore_keeps_users_and_puts_secrets_back():
    current = node_doc()
    exported = backup.export_plain(current, "edge-1", NOW)
    exported["data"]["buckets"]["b1"]["name"] = "renamed"
    exported["data"]["users"] = {}
    opened = backup.open_backup(json.loads(json.dumps(exported)), None, current, SECTIONS)
    assert opened.kind == "plain" and opened.files is None
    assert opened.doc["buckets"]["b1"] == dict(current["buckets"]["b1"], name="renamed")
    assert opened.doc["users"] == current["users"]
    assert opened.doc["node"]["secret"] == "NODESECRET"
    assert opened.doc["notifications"]["telegram"]["bot_token"] == "1:TOKEN"


def test_plain_restore_onto_another_node_keeps_its_identity():
    other = node_doc()
    other["node"] = {"id": "n2", "secret": "OTHER"}
    opened = backup.open_backup(backup.export_plain(node_doc(), "edge-1", NOW), None, other, SECTIONS)
    assert opened.doc["node"] == {"id": "n2", "secret": "OTHER"}


def test_plain_restore_refuses_a_record_whose_secret_the_node_lacks():
    exported = backup.export_plain(node_doc(), "edge-1", NOW)
    other = node_doc()
    del other["buckets"]["b1"]
    with pytest.raises(backup.BackupError, match="secrets this node does not have \\(buckets/b1/secret_key\\)"):
        backup.open_backup(exported, None, other, SECTIONS)


def test_encrypted_round_trip_carries_everything():
    files = {"certs/a.example.pem": "-----BEGIN PRIVATE KEY-----\nX\n"}
    sealed = backup.export_encrypted(node_doc(), files, PASS, "edge-1", NOW)
    text = json.dumps(sealed)
    for secret in ("HASH", "SK-b1", "1:TOKEN", "NODESECRET", "PRIVATE KEY", "media"):
        assert secret not in text
    opened = backup.open_backup(json.loads(text), PASS, {"schema": 1, "users": {}}, SECTIONS)
    assert opened.kind == "encrypted" and opened.files == files
    expected = {k: v for k, v in node_doc().items() if k != "sessions"}
    assert {k: opened.doc[k] for k in expected} == expected and "sessions" not in opened.doc


def _sealed():
    return backup.export_encrypted(node_doc(), {}, PASS, "edge-1", NOW)


def _with(doc, **changes):
    out = json.loads(json.dumps(doc))
    out.update(changes)
    return out


def _flip(text):
    raw = bytearray(base64.b64decode(text))
    raw[-1] ^= 1
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("make,passphrase,field,message", [
    (lambda: _sealed(), "wrong passphrase!", "passphrase", "wrong passphrase"),
    (lambda: _sealed(), None, "passphrase", "passphrase is required"),
    (lambda: _sealed(), "short", "passphrase", "8 to 1024"),
    (lambda: _with(_sealed(), node="other"), PASS, "passphrase", "altered"),
    (lambda: (lambda d: _with(d, ciphertext=_flip(d["ciphertext"])))(_sealed()), PASS, "passphrase", "altered"),
    (lambda: _with(_sealed(), ciphertext="***"), PASS, "backup", "malformed"),
    (lambda: _with(_sealed(), kdf={"name": "scrypt", "salt": "AA==", "n": 1 << 22, "r": 8, "p": 1}),
     PASS, "backup", "out of range"),
    (lambda: _with(_sealed(), version=backup.VERSION + 1), PASS, "backup", "newer contentnode"),
    (lambda: _with(_sealed(), schema=store.SCHEMA_VERSION + 1), PASS, "backup", "newer contentnode"),
    (lambda: _with(_sealed(), format="tarball"), PASS, "backup", "not a contentnode backup"),
    (lambda: _with(_sealed(), kind="zip"), PASS, "backup", "plain or encrypted"),
    (lambda: "backup", None, "backup", "not a contentnode backup"),
    (lambda: _with(backup.export_plain(node_doc(), "n", NOW), data=[]), None, "backup", "holds no data"),
    (lambda: _with(backup.export_plain(node_doc(), "n", NOW), secrets_omitted="x"), None, "backup", "damaged"),
    (lambda: backup.export_plain(node_doc(), "n", NOW), PASS, "passphrase", "takes no passphrase"),
    (lambda: _with(backup.export_plain(node_doc(), "n", NOW), schema=None), None, "backup", "no version"),
])
def test_bad_backups_are_refused(make, passphrase, field, message):
    with pytest.raises(backup.BackupError) as err:
        backup.open_backup(make(), passphrase, node_doc(), SECTIONS)
    assert message in str(err.value) and err.value.field == field


def test_declared_section_of_wrong_type_is_refused():
    exported = backup.export_plain(node_doc(), "n", NOW)
    exported["data"]["buckets"] = ["not", "a", "dict"]
    exported["secrets_omitted"] = []
    with pytest.raises(backup.BackupError, match="section 'buckets'"):
        backup.open_backup(exported, None, node_doc(), SECTIONS)


def test_unexpected_file_path_is_refused():
    sealed = backup.export_encrypted(node_doc(), {"../state.json": "x"}, PASS, "n", NOW)
    with pytest.raises(backup.BackupError, match="unexpected file"):
        backup.open_backup(sealed, PASS, node_doc(), SECTIONS)


def test_files_and_pre_restore_copies(tmp_path):
    data_dir = str(tmp_path)
    os.makedirs(tmp_path / "certs")
    (tmp_path / "certs" / "old.example.pem").write_text("old")
    assert backup.read_files(data_dir) == {"certs/old.example.pem": "old"}
    backup.write_files(data_dir, {"certs/new.example.pem": "new"})
    assert backup.read_files(data_dir) == {"certs/new.example.pem": "new"}
    assert oct(os.stat(tmp_path / "certs" / "new.example.pem").st_mode & 0o777) == "0o600"
    path = backup.save_pre_restore(data_dir, node_doc(), {"certs/x.pem": "k"}, NOW)
    saved = json.loads(open(path).read())
    assert saved["state"] == node_doc() and saved["files"] == {"certs/x.pem": "k"}
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
