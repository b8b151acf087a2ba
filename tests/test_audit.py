"""The activity log: every action recorded, no secrets, filters and paging, the hash chain."""

import os

import pytest

from tests.accounts import PASSWORD, audit_lines, create_user, enrol, logged_in, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App; the offline audit check runs beside a daemon process


def _walk_through_everything(node, admin):
    """Perform one of each audited account action; returns the secrets that went over the wire."""
    offset = mid_step_offset(node)
    create_user(admin, "bob", "viewer")
    bob = logged_in(node, "bob")
    admin.put("/api/users/bob", {"role": "operator"})
    admin.put("/api/users/bob/password", {"password": "bobs second passphrase"})
    admin.delete("/api/users/bob/sessions")
    node.client().login("bob", "wrong password for bob")
    admin.delete("/api/users/bob/lockout")
    bob = logged_in(node, "bob", "bobs second passphrase")
    bob.put("/api/me/password", {"current_password": "bobs second passphrase", "new_password": PASSWORD})
    secret, recovery = enrol(bob, PASSWORD, offset)
    renewed = bob.post("/api/me/2fa/recovery-codes", {"password": PASSWORD}).json["recovery_codes"]
    second = node.client()
    second.login("bob", PASSWORD)
    second.post("/api/login/2fa", {"code": "not-a-recovery-code"})
    second.post("/api/login/2fa", {"code": renewed[0]})
    sid = next(s["id"] for s in bob.get("/api/me/sessions").json["sessions"] if not s["current"])
    bob.delete(f"/api/me/sessions/{sid}")
    bob.delete("/api/me/sessions")
    bob.post("/api/me/2fa/disable", {"password": PASSWORD})
    admin.delete("/api/users/bob/2fa")
    admin.put("/api/policy", {"lockout_threshold": 6})
    bob.post("/api/logout")
    admin.delete("/api/users/bob")
    return [secret, *recovery, *renewed, PASSWORD, ADMIN_PASSWORD, "bobs second passphrase",
            *admin.cookies.values()]


def test_every_action_is_recorded_without_secrets(node, admin):
    secrets = _walk_through_everything(node, admin)
    entries = audit_lines(node)
    actions = {e["action"] for e in entries}
    expected = {"setup", "user.create", "user.update", "user.password_reset", "user.sessions_end",
                "login.failure", "user.lockout_clear", "login.success", "me.password", "2fa.setup",
                "2fa.enable", "2fa.recovery_regenerate", "login.password_ok", "login.2fa_failure",
                "2fa.recovery_used", "session.end", "session.end_others", "2fa.disable", "user.2fa_reset",
                "policy.update", "logout", "user.delete"}
    assert expected <= actions, expected - actions
    for entry in entries:
        assert set(entry) >= {"id", "time", "user", "ip", "action", "target", "ok", "detail", "prev"}
        assert entry["ip"] == "127.0.0.1" and entry["time"].endswith("Z")
    raw = "".join(open(os.path.join(node.data_dir, f), encoding="utf-8").read()
                  for f in os.listdir(node.data_dir) if f.startswith("audit.jsonl"))
    for secret in secrets:
        assert secret not in raw
    assert "$argon2" not in raw and "password_hash" not in raw
    created = next(e for e in entries if e["action"] == "user.create")
    assert created["user"] == ADMIN_USER and created["target"] == "bob" and created["detail"]["role"] == "viewer"


def test_login_failure_has_address_and_user_agent(node, admin):
    client = node.client()
    client.request("POST", "/api/login", {"username": "admin", "password": "guessing here"},
                   headers={"User-Agent": "curl/8.0"})
    entry = admin.get("/api/audit?action=login.failure").json["entries"][0]
    assert entry["ok"] is False and entry["target"] == "admin"
    assert entry["ip"] == "127.0.0.1" and entry["user_agent"] == "curl/8.0"


def test_lockouts_are_recorded(node, admin):
    client = node.client()
    for _ in range(6):
        client.login("admin", "guessing again")
    actions = [e["action"] for e in admin.get("/api/audit?action=login.").json["entries"]]
    assert "login.lockout" in actions and "login.locked" in actions


def test_filters_and_paging(node, admin):
    create_user(admin, "bob")
    create_user(admin, "carl")
    node.set_clock_offset(1800)
    logged_in(node, "bob")
    admin.put("/api/users/carl", {"disabled": True})
    everything = admin.get("/api/audit?limit=500").json
    assert everything["next_cursor"] is None
    ids = [e["id"] for e in everything["entries"]]
    assert ids == sorted(ids, reverse=True) and len(ids) >= 5

    by_user = admin.get("/api/audit?user=bob").json["entries"]
    assert by_user and all(e["user"] == "bob" for e in by_user)
    exact = admin.get("/api/audit?action=user.create").json["entries"]
    assert [e["target"] for e in exact] == ["carl", "bob"]
    prefix = admin.get("/api/audit?action=user.").json["entries"]
    assert {e["action"] for e in prefix} == {"user.create", "user.update"}

    later = everything["entries"][0]["time"]
    recent = admin.get(f"/api/audit?since={later}").json["entries"]
    assert recent and all(e["time"] >= later for e in recent)
    assert not any(e["action"] == "user.create" for e in recent)
    earlier = admin.get(f"/api/audit?until={exact[0]['time']}").json["entries"]
    assert earlier and not any(e["action"] == "user.update" for e in earlier)

    seen, cursor = [], None
    while True:
        page = admin.get("/api/audit?limit=2" + (f"&cursor={cursor}" if cursor else "")).json
        assert len(page["entries"]) <= 2
        seen += [e["id"] for e in page["entries"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids  # every entry exactly once, in order (reading the log adds no entries)


@pytest.mark.parametrize("query,field", [
    ("limit=0", "limit"), ("limit=501", "limit"), ("limit=ten", "limit"), ("cursor=abc", "cursor"),
    ("since=yesterday", "since"), ("until=2026-01-01", "until"), ("colour=red", "colour"), ("user=", "user"),
])
def test_bad_filters_are_refused(admin, query, field):
    response = admin.get(f"/api/audit?{query}")
    assert response.status == 400 and response.json["error"]["field"] == field


def test_audit_needs_users_manage(node, admin):
    create_user(admin, "vera", "viewer")
    assert logged_in(node, "vera").get("/api/audit").error_code == "forbidden"


@pytest.mark.daemon_process
def test_hash_chain_names_the_edited_line(node, admin):
    create_user(admin, "bob")
    admin.put("/api/users/bob", {"disabled": True})
    admin.delete("/api/users/bob")
    node.stop()
    intact = node.cli("audit", "verify")
    assert intact.returncode == 0, intact.stderr
    assert "intact" in intact.stdout
    path = os.path.join(node.data_dir, "audit.jsonl")
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    assert '"action":"user.create"' in lines[1]
    lines[1] = lines[1].replace('"target":"bob"', '"target":"eve"')
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    broken = node.cli("audit", "verify")
    assert broken.returncode == 1
    assert "line 3" in broken.stderr and "2 entries" in broken.stderr
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines[:1] + lines[2:])  # a deleted line breaks the chain too
    assert node.cli("audit", "verify").returncode == 1


def test_a_locked_out_flood_writes_one_entry_per_period_with_a_count(node, admin):
    """Locked-out attempts cost no hash: they must not be able to rotate real history away."""
    client = node.client()
    for _ in range(5):
        assert client.login(ADMIN_USER, "guessing again").status == 401
    for _ in range(200):
        assert client.login(ADMIN_USER, "guessing again").status == 429
    locked = [e for e in audit_lines(node) if e["action"] == "login.locked"]
    assert len(locked) == 1 and locked[0]["target"] == f"user:{ADMIN_USER}"
    node.set_clock_offset(301)  # the period is over; the account is still locked (15 minutes)
    assert client.login(ADMIN_USER, "guessing again").status == 429
    entries = admin.get("/api/audit?action=login.locked").json["entries"]
    assert [e["detail"] and e["detail"].get("repeats") for e in entries] == [None, 199, None]


def test_an_unknown_username_is_never_recorded_verbatim(node, admin):
    """A password typed into the username field must not land in the audit log or an alert."""
    typed = "Correct Horse Battery\nStaple"
    client = node.client()
    for _ in range(6):
        client.login(typed, "whatever was in the password field")
    lines = audit_lines(node)
    with open(os.path.join(node.data_dir, "audit.jsonl")) as f:
        raw = f.read()
    assert "Correct Horse" not in raw and "Staple" not in raw
    failures = [e for e in lines if e["action"] == "login.failure"]
    assert len(failures) == 5 and len({e["target"] for e in failures}) == 1
    assert failures[0]["target"].startswith("unknown-")
    lockouts = [e["target"] for e in lines if e["action"] == "login.lockout"]
    assert lockouts == ["user:" + failures[0]["target"]]
