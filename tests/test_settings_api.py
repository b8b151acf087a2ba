"""Settings over HTTP against the real daemon: defaults, partial updates that
persist, and every bad input answered 400 with nothing changed."""

import http.client
import json
import os
import socket
import ssl

import pytest

from contentnode.core.settings import DEFAULTS
from tests import certgen
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App; the restart runs a daemon process


def state_bytes(node):
    with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
        return f.read()


def test_defaults_and_login_required(node, admin):
    assert node.client().get("/api/settings").status == 401
    answer = admin.get("/api/settings")
    assert answer.status == 200 and answer.json == dict(DEFAULTS, revision=1)


@pytest.mark.daemon_process
def test_partial_update_answers_whole_object_and_persists(node, admin):
    answer = admin.put("/api/settings", {"node_name": "edge-7", "trusted_proxies": ["10.1.2.3/8"],
                                         "link_grace_seconds": 600, "acme_email": "ops@example.com"})
    assert answer.status == 200
    expected = dict(DEFAULTS, node_name="edge-7", trusted_proxies=["10.0.0.0/8"],
                    link_grace_seconds=600, acme_email="ops@example.com", revision=answer.json["revision"])
    assert answer.json == expected and expected["revision"] > 1
    again = admin.put("/api/settings", {"log_level": "debug"}).json
    assert again["node_name"] == "edge-7" and again["revision"] > expected["revision"]
    node.restart()
    assert admin.get("/api/settings").json == dict(expected, log_level="debug", revision=again["revision"])


@pytest.mark.parametrize("body,field", [
    ({"node_name": ""}, "node_name"),
    ({"public_port": 70000}, "public_port"),
    ({"acme_directory": "ftp://acme.example/dir"}, "acme_directory"),
    ({"cache_max_bytes": "1GB"}, "cache_max_bytes"),
    ({"trusted_proxies": ["10.0.0.0/40"]}, "trusted_proxies"),
    ({"log_level": "loud"}, "log_level"),
    ({"admin_allow": []}, "admin_allow"),
    ({"node_name": "ok", "colour": "red"}, "colour"),
])
def test_bad_settings_change_nothing(node, admin, body, field):
    before = state_bytes(node)
    answer = admin.put("/api/settings", body)
    assert answer.status == 400 and answer.error_code == "invalid"
    assert answer.json["error"]["field"] == field and answer.json["error"]["message"]
    assert state_bytes(node) == before


def test_empty_or_non_object_body_refused(admin):
    assert admin.put("/api/settings", {}).status == 400
    assert admin.put("/api/settings", ["node_name"]).status == 400


def test_admin_allow_validates_and_normalises(node, admin):
    answer = admin.put("/api/admin-allow", {"cidrs": ["192.0.2.9/24", "2001:db8::/32", "127.0.0.2"]})
    assert answer.status == 200
    assert answer.json["admin_allow"] == ["192.0.2.0/24", "2001:db8::/32", "127.0.0.2/32"]
    before = state_bytes(node)
    for body, field in [({"cidrs": ["192.0.2.0/33"]}, "cidrs"), ({"cidrs": "10.0.0.0/8"}, "cidrs"),
                        ({"cidrs": [], "confirm": "yes"}, "confirm"), ({}, "cidrs"),
                        ({"cidrs": [], "extra": 1}, "extra")]:
        bad = admin.put("/api/admin-allow", body)
        assert (bad.status, bad.json["error"]["field"]) == (400, field), body
    assert state_bytes(node) == before


def test_admin_allow_from_loopback_needs_no_confirm(admin):
    # the loopback admin port is never governed by the list, so nobody is shut out
    answer = admin.put("/api/admin-allow", {"cidrs": ["198.51.100.0/24"]})
    assert answer.status == 200 and answer.json["admin_allow"] == ["198.51.100.0/24"]


def test_admin_host_needs_a_name_and_a_certificate(node, admin):
    before = state_bytes(node)
    for body, message, field in [({"host": "admin"}, "fully qualified", "host"), ({"host": 5}, "string", "host"),
                                 ({"name": "a.example"}, "unknown field", "name"), ({}, "required", "host"),
                                 ({"host": "admin.example.com"}, "no valid certificate", "host")]:
        answer = admin.put("/api/admin-host", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field
        assert message in answer.json["error"]["message"], answer.json
    assert state_bytes(node) == before
    cleared = admin.put("/api/admin-host", {"host": None})
    assert cleared.status == 200 and cleared.json["admin_host"] is None


# --- the admin host over HTTPS, with the allow list enforced --------------

ADMIN_HOST = "admin.example.com"


class TlsClient:
    """HTTPS to the node's TLS listener with SNI and Host = the admin host, from a chosen source address."""

    def __init__(self, port, ca_pem, source):
        self.port, self.source = port, source
        self.context = ssl.create_default_context(cadata=ca_pem)
        self.cookies = {}

    def request(self, method, path, obj=None):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=15, source_address=(self.source, 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        conn.sock = self.context.wrap_socket(sock, server_hostname=ADMIN_HOST)
        headers = {"Host": ADMIN_HOST}
        body = None
        if obj is not None:
            body = json.dumps(obj).encode()
            headers["Content-Type"] = "application/json"
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            cookie = response.getheader("Set-Cookie")
            if cookie:
                name, _, value = cookie.split(";", 1)[0].partition("=")
                self.cookies[name] = value
            return response.status, json.loads(data) if data else None, cookie
        finally:
            conn.close()


@pytest.fixture
def admin_host(node, admin):
    """The node with HTTPS on, a certificate for ADMIN_HOST, and ADMIN_HOST as the admin host."""
    ca, ca_key = certgen.make_ca()
    leaf, leaf_key = certgen.make_leaf([ADMIN_HOST], issuer=ca, issuer_key=ca_key)
    assert admin.post("/api/domains", {"host": ADMIN_HOST}).status == 201
    uploaded = admin.post("/api/certs/upload", {"host": ADMIN_HOST, "cert_pem": certgen.cert_pem(leaf),
                                                "key_pem": certgen.key_pem(leaf_key)})
    assert uploaded.status == 200, uploaded.json
    https = admin.put("/api/https", {"enabled": True, "port": 0})
    assert https.status == 200 and https.json["listening_port"], https.json
    answer = admin.put("/api/admin-host", {"host": ADMIN_HOST.upper()})
    assert answer.status == 200 and answer.json["admin_host"] == ADMIN_HOST
    return https.json["listening_port"], certgen.cert_pem(ca)


def test_admin_host_allow_list_from_outside_and_inside(node, admin, admin_host):
    port, ca_pem = admin_host
    assert admin.put("/api/admin-allow", {"cidrs": ["127.0.0.1/32"]}).status == 200
    outside = TlsClient(port, ca_pem, "127.0.0.2")
    status, body, _ = outside.request("GET", "/api/session")
    assert (status, body["error"]["code"]) == (403, "ip_not_allowed")
    status, body, _ = outside.request("POST", "/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert status == 403 and outside.cookies == {}

    inside = TlsClient(port, ca_pem, "127.0.0.1")
    status, body, cookie = inside.request("POST", "/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert status == 200 and body["user"]["username"] == ADMIN_USER
    assert "secure" in cookie.lower()
    assert inside.request("GET", "/api/settings")[1]["admin_host"] == ADMIN_HOST

    # a list that shuts out the caller's own address needs "confirm": true
    before = state_bytes(node)
    status, body, _ = inside.request("PUT", "/api/admin-allow", {"cidrs": ["10.0.0.0/8"]})
    assert (status, body["error"]["code"], body["error"]["field"]) == (409, "conflict", "cidrs")
    assert state_bytes(node) == before
    status, body, _ = inside.request("PUT", "/api/admin-allow", {"cidrs": ["10.0.0.0/8"], "confirm": True})
    assert status == 200 and body["admin_allow"] == ["10.0.0.0/8"]
    assert inside.request("GET", "/api/session")[0] == 403
    # the loopback admin port is not governed by the list: the local operator can undo it
    assert admin.put("/api/admin-allow", {"cidrs": ["127.0.0.2/32"]}).status == 200
    status, body, _ = TlsClient(port, ca_pem, "127.0.0.2").request("GET", "/api/session")
    assert status == 200 and body["authenticated"] is False


def test_admin_host_is_https_only_and_can_be_cleared(node, admin, admin_host):
    port, ca_pem = admin_host
    admin.put("/api/admin-allow", {"cidrs": ["127.0.0.0/8"]})
    plain = node.client("public", host=ADMIN_HOST).get("/api/session")
    assert plain.status == 403 and plain.error_code == "host_not_allowed"
    assert TlsClient(port, ca_pem, "127.0.0.1").request("GET", "/api/session")[0] == 200
    assert admin.put("/api/admin-host", {"host": None}).json["admin_host"] is None
    status, body, _ = TlsClient(port, ca_pem, "127.0.0.1").request("GET", "/api/session")
    assert status == 404  # no longer the admin API: the content side answers


@pytest.mark.parametrize("key, value, endpoint", [
    ("admin_host", "admin.example.com", "PUT /api/admin-host"),
    ("admin_allow", ["10.0.0.0/8"], "PUT /api/admin-allow"),
    ("updates", {"auto_check": True}, "PUT /api/updates"),
])
def test_keys_with_their_own_endpoint_are_refused_with_a_pointer_to_it(node, admin, key, value, endpoint):
    before = state_bytes(node)
    answer = admin.put("/api/settings", {key: value})
    assert answer.status == 400 and answer.json["error"]["field"] == key
    assert endpoint in answer.json["error"]["message"]
    assert state_bytes(node) == before
