"""Two-factor login through HTTP, with real TOTP codes from pyotp."""

import re

import pytest

from tests.accounts import PASSWORD, code, create_user, enrol, logged_in, mid_step_offset, wrong_code
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP and the clock only: no process needed


def _password_step(node, username=ADMIN_USER, password=ADMIN_PASSWORD):
    client = node.client()
    response = client.login(username, password)
    assert response.status == 200 and response.json == {"two_factor_required": True, "two_factor_methods": ["totp"]}, response.body
    return client


def test_setup_needs_password_and_stays_off_until_confirmed(node, admin):
    assert admin.post("/api/me/2fa/setup", {}).status == 400
    wrong = admin.post("/api/me/2fa/setup", {"password": "not the password at all"})
    assert wrong.status == 400 and wrong.json["error"]["field"] == "password"
    setup = admin.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD})
    assert setup.status == 200
    secret = setup.json["secret"]
    assert re.fullmatch(r"[A-Z2-7]{32}", secret)  # 160 bits of base32
    assert setup.json["otpauth_uri"].startswith("otpauth://totp/") and f"secret={secret}" in setup.json["otpauth_uri"]
    assert admin.get("/api/me/2fa").json["setup_pending"] is True
    assert admin.get("/api/me").json["user"]["two_factor"] is False
    # not active yet: a login needs no code
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).json["user"]["username"] == ADMIN_USER
    bad = admin.post("/api/me/2fa/enable", {"code": wrong_code(secret, 0)})
    assert bad.status == 400 and bad.json["error"]["field"] == "code"
    assert admin.get("/api/me").json["user"]["two_factor"] is False


def test_enable_without_setup_is_a_conflict(admin):
    response = admin.post("/api/me/2fa/enable", {"code": "123456"})
    assert response.status == 409 and response.error_code == "conflict"


def test_login_with_totp_and_replay_refused(node, admin):
    offset = mid_step_offset(node)
    secret, recovery = enrol(admin, offset=offset)
    assert len(recovery) == 10 and len(set(recovery)) == 10
    assert admin.get("/api/me").json["user"]["two_factor"] is True

    client = _password_step(node)
    pending_cookie = client.cookies["cn_session"]
    assert client.get("/api/me").status == 401  # a pending login is not a session
    state = client.get("/api/session").json
    assert state["authenticated"] is False and state["two_factor_pending"] is True
    # the code used to enable is spent: replay refused
    replay = client.post("/api/login/2fa", {"code": code(secret, offset)})
    assert replay.status == 401 and replay.error_code == "bad_credentials"

    offset = mid_step_offset(node, 60)
    fresh = code(secret, offset)
    done = client.post("/api/login/2fa", {"code": fresh})
    assert done.status == 200 and done.json["user"]["username"] == ADMIN_USER
    assert client.cookies["cn_session"] != pending_cookie  # a fresh token for the full session
    assert client.get("/api/users").status == 200

    again = _password_step(node)
    assert again.post("/api/login/2fa", {"code": fresh}).status == 401  # same code, second time
    # one step of drift either side is accepted; the step before the last accepted one is a replay
    assert again.post("/api/login/2fa", {"code": code(secret, offset, -1)}).status == 401
    assert again.post("/api/login/2fa", {"code": code(secret, offset, 1)}).status == 200


def test_codes_outside_one_step_of_drift_refused(node, admin):
    offset = mid_step_offset(node)
    secret, _ = enrol(admin, offset=offset)
    offset = mid_step_offset(node, 300)
    client = _password_step(node)
    for steps in (-3, -2, 2, 3):
        assert client.post("/api/login/2fa", {"code": code(secret, offset, steps)}).status == 401
    assert client.post("/api/login/2fa", {"code": code(secret, offset, -1)}).status == 200


def test_recovery_codes_work_once_and_regenerate(node, admin):
    offset = mid_step_offset(node)
    _, recovery = enrol(admin, offset=offset)
    first = _password_step(node)
    used = first.post("/api/login/2fa", {"code": recovery[0]})
    assert used.status == 200 and used.json["user"]["username"] == ADMIN_USER
    second = _password_step(node)
    assert second.post("/api/login/2fa", {"code": recovery[0]}).status == 401
    # spaces, dashes and case do not matter
    assert second.post("/api/login/2fa", {"code": recovery[1].replace("-", " ").upper()}).status == 200
    assert admin.get("/api/me/2fa").json["recovery_codes_left"] == 8

    assert admin.post("/api/me/2fa/recovery-codes", {}).status == 400
    assert admin.post("/api/me/2fa/recovery-codes", {"password": "wrong password here"}).status == 400
    renewed = admin.post("/api/me/2fa/recovery-codes", {"password": ADMIN_PASSWORD})
    assert renewed.status == 200 and len(renewed.json["recovery_codes"]) == 10
    assert not set(renewed.json["recovery_codes"]) & set(recovery)
    third = _password_step(node)
    assert third.post("/api/login/2fa", {"code": recovery[2]}).status == 401
    assert third.post("/api/login/2fa", {"code": renewed.json["recovery_codes"][0]}).status == 200


def test_pending_step_expires_after_five_minutes(node, admin):
    offset = mid_step_offset(node)
    secret, _ = enrol(admin, offset=offset)
    client = _password_step(node)
    offset = mid_step_offset(node, 330)
    late = client.post("/api/login/2fa", {"code": code(secret, offset)})
    assert late.status == 401 and late.error_code == "unauthenticated"
    assert node.client().post("/api/login/2fa", {"code": code(secret, offset)}).error_code == "unauthenticated"


def test_second_step_is_rate_limited_until_the_lockout_ends(node, admin):
    offset = mid_step_offset(node)
    secret, _ = enrol(admin, offset=offset)
    offset = mid_step_offset(node, 60)
    client = _password_step(node)
    for _ in range(5):
        assert client.post("/api/login/2fa", {"code": wrong_code(secret, offset)}).status == 401
    locked = client.post("/api/login/2fa", {"code": code(secret, offset)})
    assert locked.status == 429 and locked.error_code == "rate_limited"
    assert int(locked.headers["retry-after"]) > 0
    assert admin.get("/api/users/admin").json["locked"] is True
    offset = mid_step_offset(node, 60 + 960)  # the lockout (900 s) is over; the pending step expired
    assert client.post("/api/login/2fa", {"code": code(secret, offset)}).error_code == "unauthenticated"
    assert _password_step(node).post("/api/login/2fa", {"code": code(secret, offset)}).status == 200


def test_disable_needs_password_and_is_refused_while_policy_requires_it(node, admin):
    offset = mid_step_offset(node)
    enrol(admin, offset=offset)
    assert admin.put("/api/policy", {"two_factor": "admins"}).status == 200
    refused = admin.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD})
    assert refused.status == 409
    assert admin.get("/api/me").json["user"]["two_factor"] is True
    assert admin.put("/api/policy", {"two_factor": "optional"}).status == 200
    wrong = admin.post("/api/me/2fa/disable", {"password": "not my password"})
    assert wrong.status == 400 and wrong.json["error"]["field"] == "password"
    done = admin.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD})
    assert done.status == 200 and done.json["user"]["two_factor"] is False
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).json["user"]["two_factor"] is False
    again = admin.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD})
    assert again.status == 409


def test_policy_all_restricts_sessions_until_enrolled(node, admin):
    create_user(admin, "olga", "operator")
    assert admin.put("/api/policy", {"two_factor": "all"}).status == 200
    olga = logged_in(node, "olga")
    refused = olga.get("/api/panel")
    assert refused.status == 403 and refused.error_code == "two_factor_enrollment_required"
    assert olga.get("/api/session").json["two_factor_enrollment_required"] is True
    assert olga.get("/api/me").status == 200
    assert olga.get("/api/me/2fa").json["required"] is True
    # the admin who set the policy is restricted too, until enrolled
    assert admin.get("/api/users").error_code == "two_factor_enrollment_required"
    offset = mid_step_offset(node)
    enrol(olga, PASSWORD, offset)
    assert olga.get("/api/panel").status == 200
    assert olga.post("/api/me/2fa/disable", {"password": PASSWORD}).status == 409


def test_enabling_ends_other_sessions(node, admin):
    other = logged_in(node, ADMIN_USER, ADMIN_PASSWORD)
    enrol(admin, offset=mid_step_offset(node))
    assert other.get("/api/me").status == 401
    assert admin.get("/api/me").status == 200


def test_replacing_the_authenticator_keeps_the_old_one_until_confirmed(node, admin):
    offset = mid_step_offset(node)
    old_secret, _ = enrol(admin, offset=offset)
    new = admin.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD}).json["secret"]
    offset = mid_step_offset(node, 60)
    assert _password_step(node).post("/api/login/2fa", {"code": code(old_secret, offset)}).status == 200
    assert admin.post("/api/me/2fa/enable", {"code": code(new, offset)}).status == 200
    offset = mid_step_offset(node, 120)
    client = _password_step(node)
    assert client.post("/api/login/2fa", {"code": code(old_secret, offset)}).status == 401
    assert client.post("/api/login/2fa", {"code": code(new, offset)}).status == 200


def test_policy_off_refuses_new_setups(admin):
    assert admin.put("/api/policy", {"two_factor": "off"}).status == 200
    refused = admin.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD})
    assert refused.status == 409 and refused.error_code == "conflict"


def test_admin_resets_a_users_2fa(node, admin):
    create_user(admin, "bob")
    bob = logged_in(node, "bob")
    enrol(bob, PASSWORD, mid_step_offset(node))
    assert _password_step(node, "bob", PASSWORD)
    assert admin.delete("/api/users/bob/2fa").status == 204
    assert node.client().login("bob", PASSWORD).json["user"]["two_factor"] is False


def test_own_2fa_is_not_turned_off_without_the_password(node, admin):
    """docs/API.md, "Two-factor authentication": disabling 2FA needs the password; the users:manage reset must not be a way around it."""
    enrol(admin, offset=mid_step_offset(node))
    refused = admin.delete("/api/users/admin/2fa")
    assert refused.status == 403 and refused.error_code == "forbidden", refused.body
    assert admin.get("/api/me").json["user"]["two_factor"] is True
    assert admin.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD}).status == 200


def test_secret_and_codes_never_shown_again(node, admin):
    offset = mid_step_offset(node)
    secret, recovery = enrol(admin, offset=offset)
    for path in ("/api/me", "/api/me/2fa", "/api/users", "/api/panel", "/api/session", "/api/audit"):
        body = admin.get(path).body.decode()
        assert secret not in body and recovery[0] not in body, path


def test_the_authenticator_label_names_the_node(admin):
    """Several nodes must look different in an authenticator app: the issuer is the node name."""
    assert admin.put("/api/settings", {"node_name": "edge: Paris 1"}).status == 200
    setup = admin.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD})
    assert setup.status == 200, setup.body
    uri = setup.json["otpauth_uri"]
    assert uri.startswith("otpauth://totp/edge%20Paris%201:") and "issuer=edge%20Paris%201" in uri
