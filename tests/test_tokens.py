"""API tokens (docs/API.md, "API tokens") through HTTP against the real daemon."""

import json
import os
import time

import pytest

from contentnode.clock import parse_rfc3339
from tests.accounts import PASSWORD, create_user, logged_in
from tests.node import ADMIN_PASSWORD

pytestmark = pytest.mark.in_process  # HTTP to the App; offline commands on a stopped node: a daemon process


def _mint(client, password, name="cron", scopes=("domains:read",), **extra):
    return client.post("/api/me/tokens", dict({"name": name, "scopes": list(scopes), "password": password}, **extra))


def _token_client(node, secret):
    client = node.client()
    response = client.post("/api/login", {"token": secret})
    return client, response


def test_create_list_revoke_and_token_login(node, admin):
    made = _mint(admin, ADMIN_PASSWORD, scopes=["domains:write", "metrics:read"], expires_in=3600)
    assert made.status == 201, made.body
    token, secret = made.json["token"], made.json["secret"]
    assert secret.startswith(f"cn_{token['id']}_") and len(secret.rpartition("_")[2]) == 64
    assert token["scopes"] == ["domains:write", "metrics:read"] and token["last_used_at"] is None
    assert parse_rfc3339(token["expires_at"]) == parse_rfc3339(token["created_at"]) + 3600  # RFC 3339 times
    assert admin.get("/api/me/tokens").json == {"tokens": [token]}
    assert admin.get("/api/users/admin/tokens").json == {"tokens": [token]}

    assert _mint(admin, ADMIN_PASSWORD, scopes=["metrics:read"]).error_code == "conflict"  # same name
    wrong = _mint(admin, "not the password", name="other")
    assert wrong.status == 400 and wrong.json["error"]["field"] == "password"

    script, login = _token_client(node, secret)
    assert login.status == 200, login.body
    assert login.json["user"]["username"] == "admin" and login.json["token"]["id"] == token["id"]
    assert login.json["token"]["last_used_at"] is not None
    session = script.get("/api/session").json
    assert session["token"] == {"id": token["id"], "name": "cron"}
    assert script.get("/api/domains").status == 200
    assert script.get("/api/users").error_code == "forbidden"  # not among the token's scopes
    assert admin.get("/api/session").json["token"] is None

    assert admin.delete(f"/api/me/tokens/{token['id']}").status == 204
    assert admin.delete(f"/api/me/tokens/{token['id']}").status == 404
    assert admin.get("/api/me/tokens").json == {"tokens": []}
    assert script.get("/api/domains").status == 401  # revoked: its session ended
    assert _token_client(node, secret)[1].error_code == "bad_credentials"


def test_scopes_must_be_a_subset(node, admin):
    create_user(admin, "vera", "viewer")
    vera = logged_in(node, "vera")
    refused = _mint(vera, PASSWORD, scopes=["domains:write"])
    assert refused.status == 400 and refused.json["error"]["field"] == "scopes"
    assert _mint(vera, PASSWORD, scopes=["bogus:scope"]).json["error"]["field"] == "scopes"
    assert _mint(vera, PASSWORD, scopes=[]).json["error"]["field"] == "scopes"
    assert _mint(vera, PASSWORD, expires_in=-5).json["error"]["field"] == "expires_in"
    assert vera.get("/api/me/tokens").json == {"tokens": []}


def test_expiry_with_the_test_clock(node, admin):
    secret = _mint(admin, ADMIN_PASSWORD, expires_in=120).json["secret"]
    script, login = _token_client(node, secret)
    assert login.status == 200
    node.set_clock_offset(121)
    assert script.get("/api/domains").status == 401
    assert _token_client(node, secret)[1].error_code == "bad_credentials"


def test_intersection_follows_the_owner_and_disable_delete_end_sessions(node, admin):
    create_user(admin, "olga", "operator")
    olga = logged_in(node, "olga")
    secret = _mint(olga, PASSWORD, scopes=["domains:write", "buckets:read"]).json["secret"]
    script, login = _token_client(node, secret)
    assert login.status == 200
    # the login answers the session's effective scopes (an operator holds more), as /api/me does
    assert set(login.json["user"]["scopes"]) == {"buckets:read", "domains:read", "domains:write"}
    assert login.json["user"] == script.get("/api/me").json["user"] and login.json["user"]["role"] == "operator"
    assert script.post("/api/domains", {}).status != 403
    admin.put("/api/users/olga", {"role": "viewer"})  # viewer keeps domains:read, loses domains:write
    assert script.post("/api/domains", {"host": "a.example.com"}).error_code == "forbidden"
    assert script.get("/api/buckets").status == 200
    me = script.get("/api/me").json  # the owner's role; the scopes this session holds; the token
    assert me["user"]["role"] == "viewer" and me["user"]["scopes"] == ["buckets:read"]
    assert me["token"] == {"id": login.json["token"]["id"], "name": "cron"}
    assert script.get("/api/session").json["user"] == me["user"] == script.get("/api/panel").json["user"]
    assert olga.get("/api/me").json["token"] is None

    admin.put("/api/users/olga", {"disabled": True})
    assert script.get("/api/buckets").status == 401
    admin.put("/api/users/olga", {"disabled": False})
    assert script.get("/api/buckets").status == 401  # ended, not merely paused
    again, login = _token_client(node, secret)
    assert login.status == 200
    assert admin.delete("/api/users/olga").status == 204
    assert again.get("/api/buckets").status == 401
    assert _token_client(node, secret)[1].error_code == "bad_credentials"


def test_token_login_under_policy_all_and_forbidden_areas(node, admin):
    secret = _mint(admin, ADMIN_PASSWORD, scopes=["users:manage", "domains:read"]).json["secret"]
    assert admin.put("/api/policy", {"two_factor": "all"}).status == 200
    script, login = _token_client(node, secret)
    assert login.status == 200 and "two_factor_required" not in login.json
    assert script.get("/api/domains").status == 200  # no enrolment demanded
    for method, path, body in [("GET", "/api/me/tokens", None),
                               ("POST", "/api/me/tokens", {"name": "x", "scopes": ["domains:read"],
                                                           "password": ADMIN_PASSWORD}),
                               ("DELETE", "/api/me/tokens/abc", None),
                               ("PUT", "/api/me/password", {"current_password": ADMIN_PASSWORD,
                                                            "new_password": "another long passphrase"}),
                               ("GET", "/api/me/2fa", None),
                               ("POST", "/api/me/2fa/setup", {"password": ADMIN_PASSWORD}),
                               ("POST", "/api/backup/export", {"passphrase": "a long passphrase"}),
                               ("POST", "/api/backup/restore", {"backup": {}})]:
        answer = script.request(method, path, body)
        assert answer.error_code == "forbidden", (method, path, answer.body)
    assert script.post("/api/backup/export", {}).status == 200  # the plain export stays allowed
    entries = script.get("/api/audit").json["entries"]  # the admin itself must enrol first now
    exported = [e for e in entries if e["action"] == "backup.export"]
    assert exported and exported[0]["detail"]["token_id"] == login.json["token"]["id"]


def test_wrong_tokens_are_limited_without_locking_the_owner(node, admin):
    secret = _mint(admin, ADMIN_PASSWORD).json["secret"]
    forged = secret[:-4] + ("AAAA" if not secret.endswith("AAAA") else "BBBB")
    codes = [_token_client(node, forged)[1].status for _ in range(7)]
    assert codes[:5] == [401] * 5 and codes[-1] == 429
    assert _token_client(node, "cn_nope")[1].status == 429  # limited per address
    assert node.client().login("admin", ADMIN_PASSWORD).status == 200  # interactive login untouched


def test_secret_never_shown_again(node, admin):
    made = _mint(admin, ADMIN_PASSWORD)
    secret = made.json["secret"]
    random_part = secret.rpartition("_")[2]
    script, _ = _token_client(node, secret)
    _token_client(node, secret + "x")
    bodies = [admin.get(p).body for p in ("/api/me/tokens", "/api/users/admin/tokens", "/api/audit",
                                          "/api/panel", "/api/session")]
    bodies.append(script.get("/api/session").body)
    plain = admin.post("/api/backup/export", {})
    assert plain.status == 200
    bodies.append(plain.body)
    for body in bodies:
        assert random_part not in (body if isinstance(body, str) else body.decode())
    assert random_part not in node.log()
    record = next(iter(plain.json["data"]["api_tokens"].values()))
    assert "hash" not in record and ["api_tokens", record["id"], "hash"] in plain.json["secrets_omitted"]
    encrypted = admin.post("/api/backup/export", {"passphrase": "a long passphrase"})
    assert encrypted.status == 200 and random_part not in json.dumps(encrypted.json)


@pytest.mark.daemon_process
def test_cli_on_a_stopped_node(node, admin):
    create_user(admin, "vera", "viewer")
    assert admin.put("/api/policy", {"two_factor": "all"}).status == 200
    node.stop()
    refused = node.cli("token", "create", "--user", "vera", "--name", "x", "--scopes", "domains:write")
    assert refused.returncode == 1 and "scopes" in refused.stderr
    made = node.cli("token", "create", "--user", "vera", "--name", "cron", "--scopes", "domains:read")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("cn_") and len(secret.rpartition("_")[2]) == 64
    listed = node.cli("token", "list")
    assert listed.returncode == 0 and "cron" in listed.stdout and secret.rpartition("_")[2] not in listed.stdout
    token_id = secret.split("_")[1]
    node.start()
    script, login = _token_client(node, secret)
    assert login.status == 200 and login.json["token"]["id"] == token_id
    assert script.get("/api/domains").status == 200
    assert script.get("/api/session").json["two_factor_policy"] == "all"  # the rest of the state survived
    node.stop()
    assert node.cli("token", "revoke", token_id).returncode == 0
    assert node.cli("token", "revoke", token_id).returncode == 1
    node.start()
    assert script.get("/api/domains").status == 401
    assert secret.rpartition("_")[2] not in node.log()


def _state(node) -> bytes:
    with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
        return f.read()


def test_last_used_at_is_written_at_most_once_a_minute(node, admin):
    secret = _mint(admin, ADMIN_PASSWORD).json["secret"]
    script, login = _token_client(node, secret)
    first = login.json["token"]["last_used_at"]
    assert first is not None
    before = _state(node)
    node.set_clock_offset(50)
    assert script.get("/api/domains").status == 200
    assert _state(node) == before  # a use within the minute writes nothing
    assert admin.get("/api/me/tokens").json["tokens"][0]["last_used_at"] == first
    node.set_clock_offset(70)
    assert script.get("/api/domains").status == 200
    later = admin.get("/api/me/tokens").json["tokens"][0]["last_used_at"]
    assert parse_rfc3339(later) - parse_rfc3339(first) >= 60 and _state(node) != before


@pytest.mark.parametrize("change, reason", [
    ({"user_id": "nobody"}, "belongs to no user"),
    ({"hash": "not-a-hash"}, "SHA-256"),
    ({"hash": "A" * 64}, "SHA-256"),
    ({"scopes": ["domains:read", "root"]}, "scopes"),
    ({"scopes": "domains:read"}, "scopes"),
    ({"expires_at": "tomorrow"}, "time"),
    ({"name": ""}, "name"),
])
def test_a_restore_with_an_invalid_token_record_changes_nothing(node, admin, change, reason):
    """A hand-edited encrypted backup cannot plant a token nobody owns, or one a session cannot read."""
    from contentnode.core import backup

    _mint(admin, ADMIN_PASSWORD)
    doc = json.loads(_state(node))
    record = next(iter(doc["api_tokens"].values()))
    record.update(change)
    passphrase = "a long passphrase"
    document = backup.export_encrypted(doc, {}, passphrase, "crafted", time.time())
    before = _state(node)
    answer = admin.post("/api/backup/restore", {"backup": document, "passphrase": passphrase})
    assert answer.status == 400 and answer.json["error"]["field"] == "backup", answer.body
    message = answer.json["error"]["message"]
    assert "the backup's api_tokens cannot be restored" in message and record["id"] in message, message
    assert reason in message, message
    assert _state(node) == before
    assert not [n for n in os.listdir(node.data_dir) if n.startswith("pre-restore-")]
    assert admin.get("/api/me/tokens").status == 200
