"""What a token session may and may not do (issue 25, items 1 and 4).

A token is a secret that lives in scripts and CI files; a stolen one must not
become a lasting or wider credential. The table in docs/API.md ("What a token
session may and may not do") is what these tests hold the node to: every row
a token session may not reach answers 403 `forbidden` and changes nothing,
whatever scopes the token holds.
"""

import pytest

from tests.accounts import PASSWORD, create_user, logged_in
from tests.node import ADMIN_PASSWORD

pytestmark = pytest.mark.in_process

ALL_SCOPES = ["metrics:read", "domains:write", "buckets:write", "routes:write", "settings:write", "users:manage",
              "notifications:manage"]


def _token_session(node, owner, password, scopes):
    made = owner.post("/api/me/tokens", {"name": "script", "scopes": scopes, "password": password})
    assert made.status == 201, made.body
    script = node.client()
    assert script.post("/api/login", {"token": made.json["secret"]}).status == 200
    return script, made.json["token"]


def test_a_token_session_neither_sees_nor_ends_its_owners_sessions(node, admin):
    """A viewer's metrics:read token listed the owner's sessions (address, browser) and logged the owner out."""
    create_user(admin, "vera", "viewer")
    vera = logged_in(node, "vera")
    script, _ = _token_session(node, vera, PASSWORD, ["metrics:read"])
    listed = script.get("/api/me/sessions")
    assert listed.status == 403 and listed.error_code == "forbidden", listed.body
    own_sessions = vera.get("/api/me/sessions").json["sessions"]
    assert len(own_sessions) == 2  # the password session and the token's
    for session in own_sessions:
        ended = script.delete(f"/api/me/sessions/{session['id']}")
        assert ended.error_code == "forbidden", ended.body
    assert script.delete("/api/me/sessions").error_code == "forbidden"
    assert vera.get("/api/me").status == 200  # the owner is still logged in
    assert len(vera.get("/api/me/sessions").json["sessions"]) == 2
    assert script.get("/api/me").status == 200  # who am I stays open to scripts
    assert script.post("/api/logout").status == 204  # and a script ends its own session by logging out


def test_a_full_scope_token_cannot_create_or_arm_accounts(node, admin):
    """A token created a custom user with every scope and a password: an account that outlives the token."""
    target = create_user(admin, "tim", "custom", scopes=["domains:read"])
    script, _ = _token_session(node, admin, ADMIN_PASSWORD, ALL_SCOPES)
    state_before = admin.get("/api/users").json
    refused = [
        ("POST", "/api/users", {"username": "mallory", "password": "a long password for her", "role": "custom",
                                "scopes": ALL_SCOPES}),
        ("PUT", "/api/users/tim", {"scopes": ALL_SCOPES}),
        ("PUT", "/api/users/tim", {"disabled": True}),
        ("PUT", "/api/users/tim/password", {"password": "a password the script knows"}),
        ("DELETE", "/api/users/tim/2fa", None),
        ("DELETE", "/api/users/tim", None),
        ("DELETE", "/api/users/tim/sessions", None),
        ("DELETE", "/api/users/tim/lockout", None),
        ("GET", "/api/users/tim/tokens", None),
        ("DELETE", "/api/users/tim/tokens/0123456789abcdef", None),
        ("PUT", "/api/policy", {"two_factor": "off"}),
        ("POST", "/api/backup/restore", {"backup": {}}),
        ("POST", "/api/backup/export", {"passphrase": "a long passphrase"}),
        # fleet credentials that outlive the token: the recovery secret and join codes
        ("POST", "/api/fleet/init", {"endpoint": "http://127.0.0.1:9", "region": "us-east-1", "bucket": "fleet",
                                     "access_key": "k", "secret_key": "s"}),
        ("POST", "/api/fleet/join-codes", {}),
        ("POST", "/api/fleet/join", {"code": "cnj_" + "A" * 60}),
        ("POST", "/api/fleet/promote", {"recovery_secret": "cnr_" + "A" * 43}),
    ]
    for method, path, body in refused:
        answer = script.request(method, path, body)
        assert answer.status == 403 and answer.error_code == "forbidden", (method, path, answer.body)
    assert admin.get("/api/users").json == state_before  # nothing changed
    assert admin.get("/api/fleet").json["role"] == "standalone"
    assert node.client().login("mallory", "a long password for her").status == 401
    # what a script legitimately reads and runs stays open
    assert script.get("/api/users").status == 200
    assert script.get(f"/api/users/{target['id']}").status == 200
    assert script.get("/api/policy").status == 200
    assert script.get("/api/audit").status == 200
    assert script.post("/api/backup/export", {}).status == 200  # plain: no secret in it
    assert script.post("/api/domains", {"host": "script.example.com"}).status == 201


def test_the_refusal_is_one_flag_on_the_rows(node, admin):
    """Every row a token session may not reach is marked on the route table, and the OpenAPI document says so."""
    from contentnode import api

    marked = {(r.method, r.pattern) for r in api.ROUTES if not r.token_session}
    assert ("GET", "/api/me/sessions") in marked and ("POST", "/api/users") in marked
    assert not any(pattern.startswith("/api/me/") and (m, pattern) not in marked
                   for m, pattern in {(r.method, r.pattern) for r in api.ROUTES}), \
        "every /api/me/... row is an owner-credential row"
    document = admin.get("/api/openapi.json").json
    assert document["paths"]["/api/me/sessions"]["get"]["x-token-session"] is False
    assert "x-token-session" not in document["paths"]["/api/domains"]["get"]
