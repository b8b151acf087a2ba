"""GET/PUT /api/policy: validation, and each setting taking effect."""

import pytest

from tests.accounts import PASSWORD, create_user, logged_in
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed

DEFAULTS = {"two_factor": "optional", "password_min_length": 12, "session_idle_timeout": 3600,
            "session_absolute_timeout": 43200, "lockout_threshold": 5, "lockout_duration": 900, "passkeys": "second_factor",
            "revision": 1}


def test_defaults_and_scope(node, admin):
    assert admin.get("/api/policy").json == DEFAULTS
    create_user(admin, "olga", "operator")
    olga = logged_in(node, "olga")
    assert olga.get("/api/policy").error_code == "forbidden"
    assert olga.put("/api/policy", {"lockout_threshold": 50}).error_code == "forbidden"
    assert admin.get("/api/policy").json == DEFAULTS


BAD = [
    ({"two_factor": "sometimes"}, "two_factor"),
    ({"two_factor": None}, "two_factor"),
    ({"passkeys": "always"}, "passkeys"),
    ({"password_min_length": 7}, "password_min_length"),
    ({"password_min_length": 129}, "password_min_length"),
    ({"password_min_length": "12"}, "password_min_length"),
    ({"password_min_length": 12.5}, "password_min_length"),
    ({"session_idle_timeout": 59}, "session_idle_timeout"),
    ({"session_idle_timeout": 50000}, "session_idle_timeout"),  # above the absolute timeout (43200)
    ({"session_absolute_timeout": 600}, "session_absolute_timeout"),  # below the idle timeout (3600)
    ({"lockout_threshold": 0}, "lockout_threshold"),
    ({"lockout_threshold": True}, "lockout_threshold"),
    ({"lockout_duration": 9}, "lockout_duration"),
    ({"lockout_duration": 10 ** 9}, "lockout_duration"),
    ({"lockout_threshold": 3, "colour": "red"}, "colour"),
]


@pytest.mark.parametrize("body,field", BAD)
def test_bad_values_are_refused_and_change_nothing(admin, body, field):
    response = admin.put("/api/policy", body)
    assert response.status == 400 and response.error_code == "invalid", response.body
    assert response.json["error"]["field"] == field
    assert admin.get("/api/policy").json == DEFAULTS


def test_partial_update_answers_the_whole_policy(admin):
    response = admin.put("/api/policy", {"session_idle_timeout": 600, "session_absolute_timeout": 3000})
    assert response.status == 200
    assert response.json == dict(DEFAULTS, session_idle_timeout=600, session_absolute_timeout=3000,
                                 revision=response.json["revision"])
    assert response.json["revision"] > DEFAULTS["revision"]
    assert admin.get("/api/policy").json == response.json
    assert admin.get("/api/session").json["two_factor_policy"] == "optional"
    assert admin.put("/api/policy", {"two_factor": "all"}).json["two_factor"] == "all"
    assert admin.get("/api/session").json["two_factor_policy"] == "all"


def test_lockout_settings_apply_at_once(node, admin):
    assert admin.put("/api/policy", {"lockout_threshold": 2, "lockout_duration": 60}).status == 200
    create_user(admin, "bob")
    client = node.client()
    assert client.login("bob", "not the right one").status == 401
    assert client.login("bob", "not the right one").status == 401
    locked = client.login("bob", PASSWORD)
    assert locked.status == 429 and 0 < int(locked.headers["retry-after"]) <= 60
    node.set_clock_offset(61)
    assert client.login("bob", PASSWORD).status == 200


def test_password_minimum_applies_to_new_passwords(node, admin):
    assert admin.put("/api/policy", {"password_min_length": 20}).status == 200
    short = admin.post("/api/users", {"username": "bob", "password": "nineteen characters", "role": "viewer"})
    assert short.status == 400 and "20" in short.json["error"]["message"]
    create_user(admin, "bob", password="twenty characters ok")
    own = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "too short for it"})
    assert own.status == 400
    # existing passwords still work
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200


def test_session_timeouts_apply(node, admin):
    assert admin.put("/api/policy", {"session_idle_timeout": 600, "session_absolute_timeout": 1000}).status == 200
    create_user(admin, "bob")
    idle = logged_in(node, "bob")
    busy = logged_in(node, "bob")
    node.set_clock_offset(500)
    assert busy.get("/api/me").status == 200
    node.set_clock_offset(700)
    assert idle.get("/api/me").status == 401  # idle for 700 s
    assert busy.get("/api/me").status == 200  # seen 200 s ago
    node.set_clock_offset(1050)
    assert busy.get("/api/me").status == 401  # past the absolute timeout despite activity


def test_two_factor_admins_restricts_only_admins(node, admin):
    create_user(admin, "olga", "operator")
    assert admin.put("/api/policy", {"two_factor": "admins"}).status == 200
    olga = logged_in(node, "olga")
    assert olga.get("/api/panel").status == 200
    assert admin.get("/api/panel").error_code == "two_factor_enrollment_required"
    assert admin.get("/api/session").json["two_factor_enrollment_required"] is True


def test_policy_change_is_audited(admin):
    admin.put("/api/policy", {"password_min_length": 14, "lockout_threshold": 7})
    entry = admin.get("/api/audit?action=policy.update").json["entries"][0]
    assert entry["user"] == ADMIN_USER
    assert entry["detail"]["changes"] == [
        {"field": "password_min_length", "from": 12, "to": 14},
        {"field": "lockout_threshold", "from": 5, "to": 7},
    ]
