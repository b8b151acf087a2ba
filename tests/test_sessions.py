"""Cookies, logout, restart, session timeouts (with the controllable clock), login limits."""

import json
import os

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP and the clock only; the restarts below run a daemon process


def cookie_attrs(resp):
    first, *attrs = [p.strip() for p in resp.headers["set-cookie"].split(";")]
    return first, {a.split("=")[0].lower(): (a.split("=", 1)[1] if "=" in a else True) for a in attrs}


def test_cookie_flags_and_token_shape(node, admin):
    r = node.client().login(ADMIN_USER, ADMIN_PASSWORD)
    assert r.status == 200 and r.json["user"]["username"] == ADMIN_USER
    first, attrs = cookie_attrs(r)
    name, _, token = first.partition("=")
    assert name == "cn_session" and len(token) >= 43  # 256 bits in base64url
    assert attrs["httponly"] is True and attrs["samesite"] == "Strict" and attrs["path"] == "/"
    assert "secure" not in attrs  # plain HTTP on loopback
    with open(os.path.join(node.data_dir, "sessions.json")) as f:
        stored = f.read()
    assert token not in stored  # only a hash is stored


def test_each_login_gets_a_fresh_token(node, admin):
    a, b = node.client(), node.client()
    a.login(ADMIN_USER, ADMIN_PASSWORD)
    b.login(ADMIN_USER, ADMIN_PASSWORD)
    assert a.cookies["cn_session"] != b.cookies["cn_session"] != admin.cookies["cn_session"]


def test_logout_ends_session_on_server(node, admin):
    stolen = dict(admin.cookies)
    r = admin.post("/api/logout")
    assert r.status == 204
    _, attrs = cookie_attrs(r)
    assert attrs["max-age"] == "0"
    replay = node.client()
    replay.cookies = stolen
    assert replay.get("/api/me").status == 401


@pytest.mark.daemon_process
def test_session_survives_restart(node, admin):
    node.restart()
    assert admin.get("/api/me").status == 200


def test_idle_timeout(node, admin):
    node.set_clock_offset(3500)
    assert admin.get("/api/me").status == 200  # activity moves last_seen
    node.set_clock_offset(3500 + 3599)
    assert admin.get("/api/me").status == 200
    node.set_clock_offset(3500 + 3599 + 3601)
    assert admin.get("/api/me").status == 401


def test_absolute_timeout(node, admin):
    for step in range(1, 13):  # active every 50 minutes: never idle, but 12 hours pass
        node.set_clock_offset(step * 3000)
        assert admin.get("/api/me").status == 200, step
    node.set_clock_offset(43201)
    assert admin.get("/api/me").status == 401


@pytest.mark.daemon_process
def test_idle_timeout_counts_across_restart(node, admin):
    admin.get("/api/me")
    node.stop()
    node.set_clock_offset(3700)
    node.start()
    assert admin.get("/api/me").status == 401


def test_wrong_password_and_unknown_user_look_the_same(node, admin):
    c = node.client()
    wrong = c.login(ADMIN_USER, "wrong password here")
    unknown = c.login("nobody", "wrong password here")
    assert wrong.status == unknown.status == 401
    assert wrong.json == unknown.json == {"error": {"code": "bad_credentials", "message": "wrong username or password"}}
    assert "set-cookie" not in wrong.headers


def test_lockout_with_retry_after_then_recovery(node, admin):
    c = node.client()
    for _ in range(5):
        assert c.login(ADMIN_USER, "wrong password here").status == 401
    locked = c.login(ADMIN_USER, ADMIN_PASSWORD)  # even the right password is refused while locked
    assert locked.status == 429 and locked.error_code == "rate_limited"
    retry = int(locked.headers["retry-after"])
    assert 1 <= retry <= 900
    node.set_clock_offset(retry + 1)
    assert c.login(ADMIN_USER, ADMIN_PASSWORD).status == 200


def test_spraying_many_accounts_from_one_address_locks_the_address(node, admin):
    """The address limit is 4 x the account threshold (20 failures in the window by default)."""
    c = node.client()
    for i in range(20):
        assert c.login(f"guess{i}", "wrong password here").status == 401
    assert c.login("guess-next", "wrong password here").status == 429
    assert c.login(ADMIN_USER, ADMIN_PASSWORD).status == 429


def test_wrong_passwords_for_one_account_do_not_lock_out_another_from_the_same_address(node, admin):
    """A cron job on 127.0.0.1 with a stale password locks its own account, not the humans beside it."""
    assert admin.post("/api/users", {"username": "cronjob", "password": "cron job long password",
                                     "role": "viewer"}).status == 201
    c = node.client()
    for _ in range(6):
        assert c.login("cronjob", "stale password here").status in (401, 429)
    assert c.login("cronjob", "cron job long password").status == 429  # that account is locked
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200  # the admin is not


def test_password_change_ends_other_sessions(node, admin):
    other = node.client()
    other.login(ADMIN_USER, ADMIN_PASSWORD)
    r = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "a brand new passphrase"})
    assert r.status == 204
    assert admin.get("/api/me").status == 200
    assert other.get("/api/me").status == 401
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 401
    assert node.client().login(ADMIN_USER, "a brand new passphrase").status == 200


def test_wrong_current_password_changes_nothing(node, admin):
    r = admin.put("/api/me/password", {"current_password": "not the password", "new_password": "a brand new passphrase"})
    assert r.status == 400 and r.json["error"]["field"] == "current_password"
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200


def test_a_stolen_session_cannot_guess_the_password_at_the_password_change(node, admin):
    """Wrong current passwords count like failed logins: after five, 429 even for the right one."""
    for n in range(5):
        r = admin.put("/api/me/password", {"current_password": f"guess number {n}",
                                           "new_password": "a brand new passphrase"})
        assert r.status == 400 and r.json["error"]["field"] == "current_password", r.body
    r = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "a brand new passphrase"})
    assert r.status == 429 and r.error_code == "rate_limited" and int(r.headers["retry-after"]) > 0
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 429  # the account is locked
    node.set_clock_offset(16 * 60)
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200


@pytest.mark.default_hash_cost  # the guesses overlap the way they do because each check is slow
def test_guesses_sent_together_cannot_get_past_the_lockout(node, admin):
    """Each attempt is counted before its (slow) password check: of 40 simultaneous wrong
    guesses only the threshold (5) are checked, the rest get 429; one lockout is recorded."""
    import threading

    statuses = []

    def guess(n):
        statuses.append(node.client().login(ADMIN_USER, f"wrong guess {n}").status)
    threads = [threading.Thread(target=guess, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses.count(401) == 5 and statuses.count(429) == 35, sorted(statuses)
    lockouts = [e for e in admin.get("/api/audit?action=login.lockout").json["entries"]
                if e["target"] == f"user:{ADMIN_USER}"]
    assert len(lockouts) == 1
    # a success gives its attempt back: five right logins in a row never lock anyone out
    os.makedirs(os.path.join(node.workdir, "second"))
    fresh = type(node)(os.path.join(node.workdir, "second")).start()
    try:
        assert fresh.client().post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        for _ in range(8):
            assert fresh.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    finally:
        fresh.close()


def test_weak_passwords_refused(node):
    c = node.client()
    for password, why in [("short", "at least 12"), ("Operator.Name", "username"), ("password1234", "common"),
                          ("x" * 1025, "at most 1024")]:
        r = c.post("/api/setup", {"username": "operator.name", "password": password})
        assert r.status == 400 and r.json["error"]["field"] == "password", password
        if why:
            assert why in r.json["error"]["message"]
    assert c.post("/api/setup", {"username": "admin", "password": "Admin" + "  " + "x" * 10}).status == 201


def test_login_and_setup_are_audited_without_secrets(node, admin):
    node.client().login(ADMIN_USER, "wrong password here")
    node.client().login(ADMIN_USER, ADMIN_PASSWORD)
    with open(os.path.join(node.data_dir, "audit.jsonl")) as f:
        entries = [json.loads(line) for line in f]
    actions = [e["action"] for e in entries]
    assert actions[:3] == ["setup", "login.failure", "login.success"]
    assert entries[1]["ip"] == "127.0.0.1" and entries[1]["ok"] is False
    blob = json.dumps(entries)
    assert ADMIN_PASSWORD not in blob and "wrong password here" not in blob
    assert all(e["prev"] for e in entries)


def test_forwarded_for_ignored_without_trusted_proxy(node, admin):
    c = node.client()
    for i in range(20):  # each claims another address: all are counted for the real peer (limit 4 x 5)
        c.post("/api/login", {"username": f"guess{i}", "password": "wrong password here"},
               headers={"X-Forwarded-For": f"203.0.113.{i}"})
    r = c.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD},
               headers={"X-Forwarded-For": "198.51.100.7"})
    assert r.status == 429


def test_forwarded_for_used_behind_a_trusted_proxy(node, admin):
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    proxy = node.client()
    for i in range(20):  # the address limit is 4 x the account threshold
        proxy.post("/api/login", {"username": f"guess{i}", "password": "wrong password here"},
                   headers={"X-Forwarded-For": "203.0.113.5"})
    locked = proxy.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD},
                        headers={"X-Forwarded-For": "203.0.113.5"})
    assert locked.status == 429
    other = proxy.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD},
                       headers={"X-Forwarded-For": "203.0.113.5, 203.0.113.6"})
    assert other.status == 200  # the rightmost untrusted hop is the client
    with open(os.path.join(node.data_dir, "audit.jsonl")) as f:
        entries = [json.loads(line) for line in f]
    assert {e["ip"] for e in entries if e["action"] == "login.failure"} == {"203.0.113.5"}
    assert entries[-1]["action"] == "login.success" and entries[-1]["ip"] == "203.0.113.6"
