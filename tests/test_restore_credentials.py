"""A restore never rolls a credential back (issue 25, item 2).

Export an encrypted backup, then revoke a token, reset a password, enrol a
second factor, disable, demote and delete accounts: restoring the backup
brought the revoked token and the old password back. Now the node keeps its
current credentials (and every session but the restorer's ends), the answer
and the audit entry name what was kept, and `restore_credentials: true`
restores them as they were, audited as such. The offline `contentnode backup
restore` runs the same restore.
"""

import json

import pytest

from tests.accounts import PASSWORD, audit_lines, create_user, enrol, logged_in, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process

PASSPHRASE = "a long backup passphrase"
NEW_PASSWORD = "a brand new passphrase here"


def _mint(client, password, name, scopes=("domains:read",)):
    made = client.post("/api/me/tokens", {"name": name, "scopes": list(scopes), "password": password})
    assert made.status == 201, made.body
    return made.json["token"]["id"], made.json["secret"]


def _token_login(node, secret):
    return node.client().post("/api/login", {"token": secret})


def _compromise_and_clean_up(node, admin):
    """Accounts and tokens, an encrypted backup, then everything an operator does after a compromise."""
    create_user(admin, "vera", "viewer")
    create_user(admin, "olga", "operator")
    create_user(admin, "dora", "viewer")
    create_user(admin, "gone", "viewer")
    vera = logged_in(node, "vera")
    revoked_id, revoked = _mint(admin, ADMIN_PASSWORD, "leaked")
    _, kept_secret = _mint(vera, PASSWORD, "vera-cron")
    assert admin.put("/api/settings", {"node_name": "before"}).status == 200
    sealed = admin.post("/api/backup/export", {"passphrase": PASSPHRASE})
    assert sealed.status == 200, sealed.body

    assert admin.delete(f"/api/me/tokens/{revoked_id}").status == 204
    assert admin.put("/api/users/vera/password", {"password": NEW_PASSWORD}).status == 200
    vera = logged_in(node, "vera", NEW_PASSWORD)
    enrol(vera, NEW_PASSWORD, mid_step_offset(node))
    assert admin.put("/api/users/olga", {"role": "viewer"}).status == 200
    assert admin.put("/api/users/dora", {"disabled": True}).status == 200
    assert admin.delete("/api/users/gone").status == 204
    create_user(admin, "late", "viewer")
    _, made_since = _mint(admin, ADMIN_PASSWORD, "made-since")
    assert admin.put("/api/settings", {"node_name": "after"}).status == 200
    return sealed.json, {"revoked": revoked, "kept": kept_secret, "made_since": made_since,
                         "revoked_id": revoked_id}


def test_a_restore_keeps_every_credential_changed_since_the_backup(node, admin):
    sealed, tokens = _compromise_and_clean_up(node, admin)
    other_admin = logged_in(node, ADMIN_USER, ADMIN_PASSWORD)
    restored = admin.post("/api/backup/restore", {"backup": sealed, "passphrase": PASSPHRASE})
    assert restored.status == 200, restored.body
    answer = restored.json
    assert answer["restore_credentials"] is False
    kept = answer["kept"]
    assert kept["tokens_revoked"] == [{"id": tokens["revoked_id"], "name": "leaked", "user": ADMIN_USER}]
    assert [t["name"] for t in kept["tokens_created"]] == ["made-since"]
    assert kept["users_deleted"] == ["gone"] and kept["users_created"] == ["late"]
    assert sorted((c["user"], c["kept"]) for c in kept["users_credentials"]) == [
        ("dora", ["disabled"]), ("olga", ["role"]), ("vera", ["password", "two_factor"])]

    # the configuration came back; no credential did
    assert admin.get("/api/settings").json["node_name"] == "before"
    assert _token_login(node, tokens["revoked"]).error_code == "bad_credentials"
    assert _token_login(node, tokens["kept"]).status == 200
    assert _token_login(node, tokens["made_since"]).status == 200
    assert node.client().login("vera", PASSWORD).status == 401
    assert node.client().login("vera", NEW_PASSWORD).json == {"two_factor_required": True, "two_factor_methods": ["totp"]}
    assert node.client().login("gone", PASSWORD).status == 401
    assert node.client().login("dora", PASSWORD).status == 401
    assert node.client().login("late", PASSWORD).status == 200
    olga = admin.get("/api/users/olga").json
    assert olga["role"] == "viewer"

    # every session but the restorer's ended
    assert answer["sessions_ended"] >= 2
    assert other_admin.get("/api/me").status == 401
    assert admin.get("/api/me").status == 200

    entry = [e for e in audit_lines(node) if e["action"] == "backup.restore"][-1]
    assert entry["detail"]["restore_credentials"] is False and entry["detail"]["kept"] == kept
    assert tokens["revoked"].rpartition("_")[2] not in json.dumps(entry)


def test_a_restore_may_narrow_but_never_widen_an_account(node, admin):
    create_user(admin, "olga", "operator")
    create_user(admin, "vera", "viewer")
    sealed = admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json
    assert admin.put("/api/users/olga", {"role": "admin"}).status == 200  # promoted since: the backup narrows
    assert admin.put("/api/users/vera", {"role": "viewer", "disabled": False}).status == 200
    restored = admin.post("/api/backup/restore", {"backup": sealed, "passphrase": PASSPHRASE})
    assert restored.status == 200 and restored.json["kept"]["users_credentials"] == [], restored.body
    assert admin.get("/api/users/olga").json["role"] == "operator"


def test_restore_credentials_brings_them_back_as_they_were_and_is_audited(node, admin):
    sealed, tokens = _compromise_and_clean_up(node, admin)
    restored = admin.post("/api/backup/restore", {"backup": sealed, "passphrase": PASSPHRASE,
                                                  "restore_credentials": True})
    assert restored.status == 200, restored.body
    assert restored.json["restore_credentials"] is True
    assert all(value == [] for value in restored.json["kept"].values())
    assert _token_login(node, tokens["revoked"]).status == 200  # asked for: the backup's tokens
    assert _token_login(node, tokens["made_since"]).error_code == "bad_credentials"
    assert node.client().login("vera", PASSWORD).status == 200
    assert node.client().login("gone", PASSWORD).status == 200
    assert node.client().login("late", PASSWORD).status == 401
    entry = [e for e in audit_lines(node) if e["action"] == "backup.restore"][-1]
    assert entry["detail"]["restore_credentials"] is True


def test_restore_credentials_with_a_plain_backup_is_refused(node, admin):
    plain = admin.post("/api/backup/export", {}).json
    answer = admin.post("/api/backup/restore", {"backup": plain, "restore_credentials": True})
    assert answer.status == 400 and answer.json["error"]["field"] == "restore_credentials", answer.body


def test_a_plain_restore_ends_the_other_sessions_too(node, admin):
    create_user(admin, "vera", "viewer")
    vera = logged_in(node, "vera")
    plain = admin.post("/api/backup/export", {}).json
    restored = admin.post("/api/backup/restore", {"backup": plain})
    assert restored.status == 200 and restored.json["sessions_ended"] == 1
    assert vera.get("/api/me").status == 401 and admin.get("/api/me").status == 200


@pytest.mark.daemon_process
def test_the_offline_restore_keeps_credentials_the_same_way(node, admin, tmp_path):
    create_user(admin, "vera", "viewer")
    revoked_id, revoked = _mint(admin, ADMIN_PASSWORD, "leaked")
    passfile = tmp_path / "pass"
    passfile.write_text(PASSPHRASE)
    target = str(tmp_path / "backup.json")
    with open(target, "w") as f:
        json.dump(admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json, f)
    assert admin.delete(f"/api/me/tokens/{revoked_id}").status == 204
    assert admin.put("/api/users/vera/password", {"password": NEW_PASSWORD}).status == 200
    node.stop()
    done = node.cli("backup", "restore", target, "--passphrase-file", str(passfile))
    assert done.returncode == 0, done.stderr
    assert "tokens revoked since the backup stay revoked: leaked (admin)" in done.stdout
    assert "current credentials kept: vera (password)" in done.stdout
    node.start()
    assert _token_login(node, revoked).error_code == "bad_credentials"
    assert node.client().login("vera", PASSWORD).status == 401
    assert node.client().login("vera", NEW_PASSWORD).status == 200
    assert admin.get("/api/me").status == 401  # an offline restore has no restorer: every session ended
    node.stop()
    again = node.cli("backup", "restore", target, "--passphrase-file", str(passfile), "--restore-credentials")
    assert again.returncode == 0 and "--restore-credentials" in again.stdout, again.stderr
    node.start()
    assert _token_login(node, revoked).status == 200
