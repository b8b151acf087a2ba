"""The spec's whole endpoint table, held here as data, against the router
table, the running daemon and docs/API.md: every row routed with exactly its
scope, refused without a session and without the scope, and documented with
an example; GET /api/panel shows exactly the sections each role may read."""

import os
import re

import pytest

from contentnode.api import ROUTES as ALL_ROUTES
from tests.node import ROOT

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed

PUBLIC, LOGIN = "public", "login"

# (method, path, access) exactly as the project's endpoint table fixes them (docs/API.md lists each).
SPEC_ROWS = [
    ("GET", "/healthz", PUBLIC),
    ("GET", "/metrics", PUBLIC),
    ("GET", "/api/session", PUBLIC),
    ("POST", "/api/setup", PUBLIC),
    ("POST", "/api/login", PUBLIC),
    ("POST", "/api/login/2fa", PUBLIC),
    ("POST", "/api/logout", PUBLIC),
    ("GET", "/api/panel", LOGIN),
    ("GET", "/api/metrics", "metrics:read"),
    ("GET", "/api/traffic/top", "metrics:read"),
    ("GET", "/api/traffic/tail", "metrics:read"),
    ("PUT", "/api/settings", "settings:write"),
    ("PUT", "/api/https", "settings:write"),
    ("PUT", "/api/admin-host", "settings:write"),
    ("PUT", "/api/admin-allow", "settings:write"),
    ("PUT", "/api/updates", "settings:write"),
    ("POST", "/api/update/check", "settings:write"),
    ("POST", "/api/domains", "domains:write"),
    ("POST", "/api/domains/check", "domains:write"),
    ("POST", "/api/domains/test", "domains:write"),
    ("POST", "/api/domains/redirect", "domains:write"),
    ("POST", "/api/certs/issue", "domains:write"),
    ("POST", "/api/certs/upload", "domains:write"),
    ("DELETE", "/api/domains/{host}", "domains:write"),
    ("POST", "/api/buckets", "buckets:write"),
    ("POST", "/api/buckets/check", "buckets:write"),
    ("POST", "/api/buckets/test", "buckets:write"),
    ("DELETE", "/api/buckets/{id}", "buckets:write"),
    ("POST", "/api/rules", "routes:write"),
    ("PUT", "/api/rules/{id}", "routes:write"),
    ("DELETE", "/api/rules/{id}", "routes:write"),
    ("POST", "/api/probe", "routes:read"),
    ("POST", "/api/purge", "routes:write"),
    ("POST", "/api/warm", "routes:write"),
    ("POST", "/api/links", "routes:write"),
    ("POST", "/api/links/rotate", "settings:write"),
    ("POST", "/api/diagnose", "routes:read"),
    ("POST", "/api/backup/export", "users:manage"),
    ("POST", "/api/backup/restore", "users:manage"),
    ("GET", "/api/notifications", "notifications:manage"),
    ("PUT", "/api/notifications", "notifications:manage"),
    ("POST", "/api/notifications/test", "notifications:manage"),
]
# The panel's static files (docs/API.md, "Panel": GET / serves the panel, no session).
PANEL_ROWS = [("GET", "/", PUBLIC), ("HEAD", "/", PUBLIC),
              ("GET", "/panel/{path...}", PUBLIC), ("HEAD", "/panel/{path...}", PUBLIC)]
# The login steps of passkeys (docs/API.md, "Passkeys"): a passwordless sign-in and the passkey
# second factor happen before there is a session, as the password and code steps do.
PASSKEY_LOGIN_ROWS = [("POST", "/api/login/passkey/options", PUBLIC), ("POST", "/api/login/passkey", PUBLIC),
                      ("POST", "/api/login/2fa/passkey-options", PUBLIC)]
# Rows that stand for a whole subtree: every route under them needs this access.
SPEC_SUBTREES = [("/api/users", "users:manage"), ("/api/audit", "users:manage"), ("/api/policy", "users:manage"),
                 ("/api/me", LOGIN)]
SUBTREE_MUST_EXIST = [("GET", "/api/users"), ("GET", "/api/audit"), ("GET", "/api/policy"), ("GET", "/api/me"),
                      ("PUT", "/api/me/password")]

ALL_SCOPES = ["metrics:read", "domains:read", "domains:write", "buckets:read", "buckets:write", "routes:read",
              "routes:write", "settings:write", "users:manage", "notifications:manage"]
PASSWORD = "conformance password 1!"


def routed():
    return {(r.method, r.pattern): r.access for r in ALL_ROUTES}


def in_subtree(pattern, prefix):
    return pattern == prefix or pattern.startswith(prefix + "/")


@pytest.mark.parametrize("method,path,access", SPEC_ROWS)
def test_every_spec_row_is_routed_with_its_scope(method, path, access):
    table = routed()
    assert (method, path) in table, f"{method} {path} is not routed"
    assert table[(method, path)] == access


def test_subtrees_are_routed_with_their_scope():
    table = routed()
    for key in SUBTREE_MUST_EXIST:
        assert key in table, f"{key} is not routed"
    for (method, pattern), access in table.items():
        for prefix, wanted in SPEC_SUBTREES:
            if in_subtree(pattern, prefix):
                assert access == wanted, f"{method} {pattern} needs {wanted}, routed with {access}"


def test_no_route_outside_the_spec_is_public():
    public = {(m, p) for m, p, a in SPEC_ROWS + PANEL_ROWS + PASSKEY_LOGIN_ROWS if a == PUBLIC}
    extra = sorted(k for k, a in routed().items() if a == PUBLIC and k not in public)
    assert extra == []


def _documented():
    with open(os.path.join(ROOT, "docs", "API.md"), encoding="utf-8") as f:
        text = f.read()
    sections = {}
    for block in re.split(r"^### ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        for method, path in re.findall(r"\b(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^\s,?]*)", heading):
            sections[(method, path)] = body
    return sections


def test_every_routed_endpoint_is_documented_with_an_example():
    docs = _documented()
    missing = sorted(f"{m} {p}" for m, p in routed() if (m, p) not in docs)
    assert missing == [], f"docs/API.md has no '### METHOD path' section for: {missing}"
    without_example = sorted(f"{m} {p}" for (m, p) in routed() if "```" not in docs[(m, p)])
    assert without_example == [], f"no example in docs/API.md for: {without_example}"


# --- against the running daemon --------------------------------------------

def concrete(path):
    return path.replace("{host}", "www.example.com").replace("{id}", "nonexistent")


def _without(scope):
    """All scopes except `scope` (and except the write scope that would imply it)."""
    drop = {scope, scope.replace(":read", ":write")}
    return [s for s in ALL_SCOPES if s not in drop]


@pytest.fixture
def lacking(node, admin):
    """scope -> a client logged in as a custom user holding every other scope."""
    clients = {}
    for scope in sorted({a for _, _, a in SPEC_ROWS if ":" in a}):
        name = "lacks-" + scope.replace(":", "-")
        made = admin.post("/api/users", {"username": name, "password": PASSWORD, "role": "custom",
                                         "scopes": _without(scope)})
        assert made.status == 201, made.json
        client = node.client()
        assert client.login(name, PASSWORD).status == 200
        clients[scope] = client
    return clients


def test_daemon_refuses_each_row_without_session_and_without_scope(node, lacking):
    anonymous = node.client()
    for method, path, access in SPEC_ROWS:
        if access == PUBLIC:
            continue
        body = {} if method in ("POST", "PUT") else None
        answer = anonymous.request(method, concrete(path), body)
        assert (answer.status, answer.error_code) == (401, "unauthenticated"), (method, path)
        if access == LOGIN:
            continue
        answer = lacking[access].request(method, concrete(path), body)
        assert (answer.status, answer.error_code) == (403, "forbidden"), (method, path, answer.body)


SECTIONS = {"metrics": "metrics:read", "domains": "domains:read", "buckets": "buckets:read", "rules": "routes:read",
            "settings": "settings:write", "updates": "settings:write", "users": "users:manage",
            "notifications": "notifications:manage"}


@pytest.mark.parametrize("role,scopes,expected", [
    ("admin", None, set(SECTIONS)),
    ("operator", None, {"metrics", "domains", "buckets", "rules"}),
    ("viewer", None, {"metrics", "domains", "buckets", "rules"}),
    ("custom", ["notifications:manage"], {"notifications"}),
    ("custom", ["users:manage", "domains:read"], {"users", "domains"}),
    ("custom", [], set()),
])
def test_panel_sections_per_role(node, admin, role, scopes, expected):
    if role == "admin":
        client = admin
    else:
        body = {"username": "panel-user", "password": PASSWORD, "role": role}
        if scopes is not None:
            body["scopes"] = scopes
        assert admin.post("/api/users", body).status == 201
        client = node.client()
        assert client.login("panel-user", PASSWORD).status == 200
    panel = client.get("/api/panel")
    assert panel.status == 200 and panel.json["user"]["role"] == role
    shown = {name for name in SECTIONS if name in panel.json}
    assert shown == expected
    if "notifications" in expected:
        assert "password" not in panel.json["notifications"]["email"]
    if "settings" in expected:
        assert panel.json["settings"]["node_name"] == "contentnode"
