"""Offline recovery on a stopped node: `contentnode user ...` and `contentnode audit verify`."""

import os

from tests.accounts import PASSWORD, audit_lines, create_user, enrol, logged_in, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

NEW = "recovered admin passphrase"


def test_create_the_first_admin_offline_on_an_empty_data_dir(tmp_path):
    node = Node(str(tmp_path))
    made = node.cli("user", "create", "root", input_text=NEW + "\n")
    assert made.returncode == 0, made.stderr
    assert NEW not in made.stdout + made.stderr
    listed = node.cli("user", "list")
    assert listed.returncode == 0 and "root" in listed.stdout and "admin" in listed.stdout
    node.start()
    try:
        client = node.client()
        assert client.get("/api/session").json["setup_required"] is False
        assert client.login("root", NEW).json["user"]["role"] == "admin"
    finally:
        node.kill()


def test_sole_admin_locked_out_gets_back_in(node, admin):
    offset = mid_step_offset(node)
    enrol(admin, ADMIN_PASSWORD, offset)
    create_user(admin, "bob", "operator")
    node.stop()
    # forgot the password and lost the authenticator
    reset = node.cli("user", "reset-password", "ADMIN", input_text=NEW + "\n")
    assert reset.returncode == 0, reset.stderr
    assert "1 session(s) ended" in reset.stdout
    assert node.cli("user", "reset-2fa", "admin").returncode == 0
    node.start()
    assert admin.get("/api/me").status == 401  # the old session ended
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 401
    back = node.client()
    assert back.login(ADMIN_USER, NEW).json["user"]["two_factor"] is False  # no second step
    assert back.get("/api/users").status == 200
    offline = [e for e in audit_lines(node) if (e.get("detail") or {}).get("offline")]
    assert [e["action"] for e in offline] == ["user.password_reset", "user.2fa_reset"]


def test_refuses_to_run_beside_the_daemon(node, admin):
    result = node.cli("user", "reset-password", "admin", input_text=NEW + "\n")
    assert result.returncode == 1 and "in use" in result.stderr
    assert node.cli("user", "list").returncode == 1
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200


def test_refusals_change_nothing(node, admin):
    create_user(admin, "bob")
    node.stop()
    state = os.path.join(node.data_dir, "state.json")
    with open(state, "rb") as f:
        before = f.read()
    cases = [
        (("user", "reset-password", "nobody"), NEW, "no user named"),
        (("user", "reset-password", "bob"), "short", "at least 12"),
        (("user", "reset-password", "bob"), "bob", "at least 12"),
        (("user", "create", "BOB"), NEW, "already exists"),
        (("user", "create", "bad/name"), NEW, "username"),
        (("user", "create", "eve", "--role", "viewer", "--scopes", "metrics:read"), NEW, "custom"),
        (("user", "create", "eve", "--role", "custom", "--scopes", "root:all"), NEW, "unknown scope"),
    ]
    for args, password, message in cases:
        result = node.cli(*args, input_text=password + "\n")
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    # a password is never a flag
    flagged = node.cli("user", "create", "eve", "--password", NEW)
    assert flagged.returncode == 2
    with open(state, "rb") as f:
        assert f.read() == before


def test_custom_user_and_re_enabling(node, admin):
    create_user(admin, "bob")
    create_user(admin, "second", "admin")
    assert admin.put("/api/users/bob", {"disabled": True}).status == 200
    node.stop()
    made = node.cli("user", "create", "carol", "--role", "custom", "--scopes", "metrics:read,domains:write",
                    input_text=PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    assert node.cli("user", "reset-password", "bob", "--enable", input_text=NEW + "\n").returncode == 0
    node.start()
    carol = logged_in(node, "carol")
    assert carol.get("/api/me").json["user"]["scopes"] == ["metrics:read", "domains:read", "domains:write"]
    assert logged_in(node, "bob", NEW).get("/api/me").json["user"]["disabled"] is False
