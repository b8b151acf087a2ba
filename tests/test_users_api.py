"""User management and one's own sessions, through HTTP against the real daemon."""

import pytest

from tests.accounts import PASSWORD, create_user, logged_in
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed


def test_create_read_list_update_delete(node, admin):
    bob = create_user(admin, "bob", "viewer")
    assert bob["role"] == "viewer" and bob["scopes"] == ["metrics:read", "domains:read", "buckets:read", "routes:read"]
    assert bob["two_factor"] is False and bob["disabled"] is False and bob["last_login_at"] is None
    assert not any(k for k in bob if "hash" in k or "secret" in k or k == "password")
    assert admin.get(f"/api/users/{bob['id']}").json == bob
    assert admin.get("/api/users/BOB").json["id"] == bob["id"]  # a username works in the path too
    names = [u["username"] for u in admin.get("/api/users").json["users"]]
    assert names == ["admin", "bob"]

    custom = admin.put("/api/users/bob", {"role": "custom", "scopes": ["domains:write", "metrics:read"]})
    assert custom.status == 200
    assert custom.json["role"] == "custom"
    assert custom.json["scopes"] == ["metrics:read", "domains:read", "domains:write"]  # write implies read
    keeps = admin.put("/api/users/bob", {"disabled": False})
    assert keeps.json["scopes"] == custom.json["scopes"]
    viewer = admin.put("/api/users/bob", {"role": "operator"})
    assert viewer.json["role"] == "operator" and "buckets:write" in viewer.json["scopes"]

    assert admin.delete("/api/users/bob").status == 204
    assert admin.get("/api/users/bob").status == 404
    assert admin.delete("/api/users/bob").status == 404
    log = node.log()
    assert "event user_created" in log and "event user_deleted" in log


def test_create_custom_without_scopes_and_panel_section(node, admin):
    empty = create_user(admin, "carol", "custom")
    assert empty["scopes"] == []
    carol = logged_in(node, "carol")
    assert "users" not in carol.get("/api/panel").json
    assert carol.get("/api/users").status == 403
    panel = admin.get("/api/panel").json
    assert [u["username"] for u in panel["users"]] == ["admin", "carol"]


BAD_CREATES = [
    ({"username": "x", "password": PASSWORD}, "role"),
    ({"username": "x", "password": PASSWORD, "role": "root"}, "role"),
    ({"username": "x", "password": PASSWORD, "role": "custom", "scopes": ["users:delete"]}, "scopes"),
    ({"username": "x", "password": PASSWORD, "role": "custom", "scopes": "metrics:read"}, "scopes"),
    ({"username": "x", "password": PASSWORD, "role": "viewer", "scopes": ["metrics:read"]}, "scopes"),
    ({"username": "-x", "password": PASSWORD, "role": "viewer"}, "username"),
    ({"username": "a" * 65, "password": PASSWORD, "role": "viewer"}, "username"),
    ({"password": PASSWORD, "role": "viewer"}, "username"),
    ({"username": "x", "password": "short", "role": "viewer"}, "password"),
    ({"username": "x", "password": "x" * 1025, "role": "viewer"}, "password"),
    ({"username": "longusername1", "password": "LongUsername1", "role": "viewer"}, "password"),
    ({"username": "x", "password": "password1234", "role": "viewer"}, "password"),
    ({"username": "x", "password": PASSWORD, "role": "viewer", "disabled": "yes"}, "disabled"),
    ({"username": "x", "password": PASSWORD, "role": "viewer", "admin": True}, "admin"),
]


@pytest.mark.parametrize("body,field", BAD_CREATES)
def test_bad_creates_are_refused_and_change_nothing(admin, body, field):
    response = admin.post("/api/users", body)
    assert response.status == 400 and response.error_code == "invalid", response.body
    assert response.json["error"]["field"] == field
    assert len(admin.get("/api/users").json["users"]) == 1


def test_bad_updates_are_refused_and_change_nothing(admin):
    bob = create_user(admin, "bob", "viewer")
    for body, field in [({"role": "boss"}, "role"), ({"scopes": ["metrics:read"]}, "scopes"),
                        ({"role": "custom", "scopes": ["nope"]}, "scopes"), ({"disabled": 1}, "disabled"),
                        ({"username": "robert"}, "username")]:
        response = admin.put("/api/users/bob", body)
        assert response.status == 400 and response.json["error"]["field"] == field, body
    assert admin.put("/api/users/bob", [1]).status == 400
    assert admin.get("/api/users/bob").json == bob
    assert admin.put("/api/users/nobody", {"role": "viewer"}).status == 404


def test_duplicate_username_is_a_conflict(admin):
    create_user(admin, "bob")
    response = admin.post("/api/users", {"username": "Bob", "password": PASSWORD, "role": "operator"})
    assert response.status == 409 and response.error_code == "conflict"
    assert [u["role"] for u in admin.get("/api/users").json["users"]] == ["admin", "viewer"]


def test_last_enabled_admin_is_protected(admin):
    for method, path, body in [("DELETE", "/api/users/admin", None),
                               ("PUT", "/api/users/admin", {"disabled": True}),
                               ("PUT", "/api/users/admin", {"role": "operator"})]:
        response = admin.request(method, path, body)
        assert response.status == 409 and response.error_code == "last_admin", (method, body)
    create_user(admin, "second", "admin")
    assert admin.put("/api/users/second", {"disabled": True}).status == 200
    # a disabled admin does not count
    assert admin.put("/api/users/admin", {"role": "viewer"}).error_code == "last_admin"
    assert admin.put("/api/users/second", {"disabled": False}).status == 200
    demoted = admin.put("/api/users/admin", {"role": "operator"})
    assert demoted.status == 200 and demoted.json["role"] == "operator"
    assert admin.get("/api/users").status == 403  # the demotion applies on the very next request
    assert admin.get("/api/me").json["user"]["role"] == "operator"


def test_manager_without_admin_role_cannot_escalate(node, admin):
    create_user(admin, "mia", "custom", ["users:manage", "metrics:read", "domains:write"])
    create_user(admin, "vic", "viewer")
    mia = logged_in(node, "mia")
    allowed = mia.post("/api/users", {"username": "dora", "password": PASSWORD, "role": "custom",
                                      "scopes": ["domains:read", "metrics:read"]})
    assert allowed.status == 201
    refused = [
        mia.post("/api/users", {"username": "e1", "password": PASSWORD, "role": "admin"}),
        mia.post("/api/users", {"username": "e2", "password": PASSWORD, "role": "viewer"}),  # buckets:read...
        mia.post("/api/users", {"username": "e3", "password": PASSWORD, "role": "custom",
                                "scopes": ["settings:write"]}),
        mia.put("/api/users/dora", {"scopes": ["domains:write", "routes:write"]}),
        mia.put("/api/users/mia", {"scopes": ["users:manage", "settings:write"]}),
        mia.put("/api/users/mia", {"role": "admin"}),
        mia.put("/api/users/admin", {"disabled": True}),
        mia.put("/api/users/admin/password", {"password": "a password mia knows now"}),
        mia.delete("/api/users/admin"),
        mia.delete("/api/users/admin/2fa"),
        mia.delete("/api/users/admin/sessions"),
        mia.put("/api/users/vic", {"disabled": True}),  # vic holds scopes mia lacks
    ]
    for response in refused:
        assert response.status == 403 and response.error_code == "forbidden", response.body
    users = {u["username"]: u for u in admin.get("/api/users").json["users"]}
    assert sorted(users) == ["admin", "dora", "mia", "vic"]
    assert users["admin"]["disabled"] is False and users["vic"]["disabled"] is False
    assert users["mia"]["scopes"] == ["metrics:read", "domains:read", "domains:write", "users:manage"]
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    assert mia.put("/api/users/dora", {"disabled": True}).status == 200


def test_disable_ends_sessions_and_blocks_login(node, admin):
    create_user(admin, "bob")
    bob = logged_in(node, "bob")
    assert admin.put("/api/users/bob", {"disabled": True}).json["disabled"] is True
    assert bob.get("/api/me").status == 401
    assert node.client().login("bob", PASSWORD).error_code == "bad_credentials"
    assert admin.put("/api/users/bob", {"disabled": False}).status == 200
    assert bob.get("/api/me").status == 401  # the ended session stays ended
    logged_in(node, "bob")


def test_delete_ends_sessions(node, admin):
    create_user(admin, "bob")
    bob = logged_in(node, "bob")
    assert admin.delete("/api/users/bob").status == 204
    assert bob.get("/api/me").status == 401
    assert node.client().login("bob", PASSWORD).status == 401


def test_password_reset_ends_sessions(node, admin):
    create_user(admin, "bob")
    bob = logged_in(node, "bob")
    weak = admin.put("/api/users/bob/password", {"password": "bob"})
    assert weak.status == 400 and weak.json["error"]["field"] == "password"
    assert bob.get("/api/me").status == 200
    reset = admin.put("/api/users/bob/password", {"password": "a brand new passphrase"})
    assert reset.status == 200 and reset.json["sessions"] == 0
    assert bob.get("/api/me").status == 401
    assert node.client().login("bob", PASSWORD).status == 401
    logged_in(node, "bob", "a brand new passphrase")
    # one's own password is not reset here: a session alone must not change it
    own = admin.put("/api/users/admin/password", {"password": "another admin passphrase"})
    assert own.status == 403 and "/api/me/password" in own.json["error"]["message"]
    assert node.client().login("admin", "another admin passphrase").status == 401


def test_role_and_scope_changes_apply_on_the_next_request(node, admin):
    create_user(admin, "bob", "custom", ["users:manage"])
    bob = logged_in(node, "bob")
    assert bob.get("/api/users").status == 200
    assert admin.put("/api/users/bob", {"scopes": ["metrics:read"]}).status == 200
    assert bob.get("/api/users").error_code == "forbidden"
    assert admin.put("/api/users/bob", {"role": "admin"}).status == 200
    assert bob.get("/api/users").status == 200
    assert bob.get("/api/me").json["user"]["role"] == "admin"


def test_end_a_users_sessions(node, admin):
    create_user(admin, "bob")
    first, second = logged_in(node, "bob"), logged_in(node, "bob")
    assert admin.get("/api/users/bob").json["sessions"] == 2
    assert admin.delete("/api/users/bob/sessions").status == 204
    assert first.get("/api/me").status == 401 and second.get("/api/me").status == 401
    assert admin.get("/api/users/bob").json["sessions"] == 0


def test_lockout_gives_429_then_clearing_it_lets_the_user_in(node, admin):
    create_user(admin, "bob")
    logged_in(node, "bob")  # 127.0.0.1 becomes an address bob logged in from
    client = node.client()
    for _ in range(5):
        assert client.login("bob", "wrong password number").status == 401
    locked = client.login("bob", PASSWORD)
    assert locked.status == 429 and locked.error_code == "rate_limited"
    assert int(locked.headers["retry-after"]) > 0
    assert admin.get("/api/users/bob").json["locked"] is True
    assert admin.delete("/api/users/bob/lockout").status == 204
    assert admin.get("/api/users/bob").json["locked"] is False
    assert client.login("bob", PASSWORD).status == 200


def test_lockout_ends_by_itself(node, admin):
    create_user(admin, "bob")
    client = node.client()
    for _ in range(5):
        client.login("bob", "wrong password number")
    assert client.login("bob", PASSWORD).status == 429
    node.set_clock_offset(901)
    assert client.login("bob", PASSWORD).status == 200


def test_my_sessions_list_and_end(node, admin):
    create_user(admin, "bob")
    phone = node.client()
    assert phone.request("POST", "/api/login", {"username": "bob", "password": PASSWORD},
                         headers={"User-Agent": "phone browser"}).status == 200
    laptop, tablet = logged_in(node, "bob"), logged_in(node, "bob")
    sessions = laptop.get("/api/me/sessions").json["sessions"]
    assert len(sessions) == 3
    assert [s["current"] for s in sessions].count(True) == 1
    assert {s["user_agent"] for s in sessions} >= {"phone browser"}
    assert all(s["ip"] == "127.0.0.1" and s["created_at"].endswith("Z") and s["last_seen_at"] for s in sessions)
    phone_id = next(s["id"] for s in sessions if s["user_agent"] == "phone browser")
    assert laptop.delete(f"/api/me/sessions/{phone_id}").status == 204
    assert phone.get("/api/me").status == 401
    assert laptop.delete(f"/api/me/sessions/{phone_id}").status == 404
    admin_session = admin.get("/api/me/sessions").json["sessions"][0]["id"]
    assert laptop.delete(f"/api/me/sessions/{admin_session}").status == 404  # not bob's
    assert admin.get("/api/me").status == 200
    assert laptop.delete("/api/me/sessions").status == 204  # all the others
    assert tablet.get("/api/me").status == 401
    assert len(laptop.get("/api/me/sessions").json["sessions"]) == 1
    own = laptop.get("/api/me/sessions").json["sessions"][0]["id"]
    ended = laptop.delete(f"/api/me/sessions/{own}")
    assert ended.status == 204 and "Max-Age=0" in ended.headers["set-cookie"]
    assert laptop.get("/api/me").status == 401
