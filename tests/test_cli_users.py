"""Offline recovery on a stopped node: `contentnode user ...` and `contentnode audit verify`."""

import os

from tests.accounts import PASSWORD, audit_lines, create_user, enrol, logged_in, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

NEW = "recovered admin passphrase"


def test_create_the_first_admin_offline_on_an_empty_data_dir(tmp_path):
    node = Node(str(tmp_path))
    made = node.cli("user", "create", "root", "--role", "admin", input_text=NEW + "\n")
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
        (("user", "create", "BOB", "--role", "viewer"), NEW, "already exists"),
        (("user", "create", "bad/name", "--role", "viewer"), NEW, "username"),
        (("user", "create", "eve", "--role", "viewer", "--scopes", "metrics:read"), NEW, "custom"),
        (("user", "create", "eve", "--role", "custom", "--scopes", "root:all"), NEW, "unknown scope"),
    ]
    for args, password, message in cases:
        result = node.cli(*args, input_text=password + "\n")
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    # a password is never a flag
    flagged = node.cli("user", "create", "eve", "--role", "viewer", "--password", NEW)
    assert flagged.returncode == 2
    # the role is never guessed: without --role nothing is made and the choices are named
    roleless = node.cli("user", "create", "eve", input_text=NEW + "\n")
    assert roleless.returncode == 2
    assert "required: --role" in roleless.stderr and "admin,operator,viewer,custom" in roleless.stderr
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


def test_help_lists_the_roles_scopes_and_defaults():
    """The choices come from the role and scope tables in auth, the defaults from the config schema."""
    from contentnode.auth.scopes import ROLES, SCOPES
    from contentnode.config import OPTIONS
    from tests.test_startup import run_cli
    create = run_cli("user", "create", "--help")
    text = " ".join(create.stdout.split())
    assert create.returncode == 0
    assert "{" + ",".join(ROLES) + "}" in text
    for scope in SCOPES:
        assert scope in text
    assert "default: contentnode-data" in text
    token = " ".join(run_cli("token", "create", "--help").stdout.split())
    assert all(scope in token for scope in SCOPES)
    serve = " ".join(run_cli("serve", "--help").stdout.split())
    assert "{debug,info,warning,error}" in serve
    for option in OPTIONS:
        if option.name in ("data_dir", "admin_bind", "admin_port", "public_bind", "public_port", "log_level"):
            assert f"--{option.name.replace('_', '-')}" in serve and f"(default: {option.default})" in serve


def test_offline_commands_never_take_over_an_unrelated_folder(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "photo.jpg").write_bytes(b"\xff\xd8")
    os.chmod(theirs, 0o755)
    result = Node(str(tmp_path)).cli("user", "create", "root", "--role", "admin", input_text=NEW + "\n")
    assert result.returncode == 0  # Node's own data dir: new, so it is made
    from tests.test_startup import run_cli
    refused = run_cli("user", "create", "root", "--role", "admin", "--data-dir", str(theirs))
    assert refused.returncode == 2 and f"the data dir {theirs} already holds" in refused.stderr
    assert sorted(p.name for p in theirs.iterdir()) == ["photo.jpg"]
    assert os.stat(theirs).st_mode & 0o777 == 0o755
