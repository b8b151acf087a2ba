"""Every protected row of the live route table, asked by an anonymous caller and by each kind of user.

The expected scopes per role are written out here from the spec, not taken
from contentnode.auth.scopes, so a wrong role table fails these tests.

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed
Rows added by later areas are covered without touching this file.
"""

import re

import pytest

from contentnode.api import ROUTES as ALL_ROUTES
from tests.accounts import PASSWORD, create_user, logged_in
from tests.inprocess import node_class
from tests.node import ADMIN_PASSWORD, ADMIN_USER

ALL = {"metrics:read", "domains:read", "domains:write", "buckets:read", "buckets:write", "routes:read",
       "routes:write", "settings:write", "users:manage", "notifications:manage"}
USERS = {  # name: (role, chosen scopes, scopes the spec says the user holds)
    "admin": ("admin", None, ALL),
    "olga": ("operator", None, {"metrics:read", "domains:read", "domains:write", "buckets:read",
                                "buckets:write", "routes:read", "routes:write"}),
    "vera": ("viewer", None, {"metrics:read", "domains:read", "buckets:read", "routes:read"}),
    "mo": ("custom", ["metrics:read"], {"metrics:read"}),
    "pat": ("custom", ["users:manage", "notifications:manage"], {"users:manage", "notifications:manage"}),
}
ROUTES = ALL_ROUTES
PROTECTED = [r for r in ROUTES if r.access != "public"]
SCOPED = [r for r in ROUTES if r.access not in ("public", "login")]


def _path(route) -> str:
    return re.sub(r"\{\w+\}", "dummy-value", route.pattern)


def _call(client, route):
    body = {} if route.method in ("POST", "PUT", "PATCH") else None
    return client.request(route.method, _path(route), body)


def _name(route) -> str:
    return f"{route.method} {route.pattern}"


@pytest.fixture(scope="module")
def clients(request, tmp_path_factory):
    node = node_class(request)(str(tmp_path_factory.mktemp("authorization"))).start()
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        result = {"admin": admin, "anonymous": node.client()}
        for name, (role, scopes, _) in USERS.items():
            if name != "admin":
                create_user(admin, name, role, scopes)
                result[name] = logged_in(node, name, PASSWORD)
        yield result
    finally:
        node.close()


def test_the_table_has_protected_rows():
    assert len(SCOPED) >= 10 and {r.access for r in SCOPED} <= ALL


@pytest.mark.parametrize("route", PROTECTED, ids=_name)
def test_anonymous_caller_gets_401(clients, route):
    response = _call(clients["anonymous"], route)
    assert response.status == 401 and response.error_code == "unauthenticated", response.body


@pytest.mark.parametrize("user", sorted(USERS))
@pytest.mark.parametrize("route", SCOPED, ids=_name)
def test_scope_is_enforced(clients, route, user):
    response = _call(clients[user], route)
    if route.access in USERS[user][2]:
        assert response.status != 401, response.body
        assert not (response.status == 403 and response.error_code == "forbidden"), response.body
    else:
        assert response.status == 403 and response.error_code == "forbidden", response.body


@pytest.mark.parametrize("user", sorted(USERS))
def test_sessions_survived_the_sweep(clients, user):
    """None of the calls above ended a session, so every answer was about scopes."""
    assert clients[user].get("/api/me").json["user"]["username"] == user
