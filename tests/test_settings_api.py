"""Settings over HTTP against the real daemon: defaults, partial updates that
persist, and every bad input answered 400 with nothing changed."""

import os

import pytest

from contentnode.core.settings import DEFAULTS


def state_bytes(node):
    with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
        return f.read()


def test_defaults_and_login_required(node, admin):
    assert node.client().get("/api/settings").status == 401
    answer = admin.get("/api/settings")
    assert answer.status == 200 and answer.json == DEFAULTS


def test_partial_update_answers_whole_object_and_persists(node, admin):
    answer = admin.put("/api/settings", {"node_name": "edge-7", "trusted_proxies": ["10.1.2.3/8"],
                                         "link_grace_seconds": 600, "acme_email": "ops@example.com"})
    assert answer.status == 200
    expected = dict(DEFAULTS, node_name="edge-7", trusted_proxies=["10.0.0.0/8"],
                    link_grace_seconds=600, acme_email="ops@example.com")
    assert answer.json == expected
    assert admin.put("/api/settings", {"log_level": "debug"}).json["node_name"] == "edge-7"
    node.restart()
    assert admin.get("/api/settings").json == dict(expected, log_level="debug")


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
                        ({"cidrs": [], "extra": 1}, "cidrs")]:
        bad = admin.put("/api/admin-allow", body)
        assert (bad.status, bad.json["error"]["field"]) == (400, field), body
    assert state_bytes(node) == before


def test_admin_allow_from_loopback_needs_no_confirm(admin):
    # the loopback admin port is never governed by the list, so nobody is shut out
    answer = admin.put("/api/admin-allow", {"cidrs": ["198.51.100.0/24"]})
    assert answer.status == 200 and answer.json["admin_allow"] == ["198.51.100.0/24"]


def test_admin_host_needs_a_name_and_a_certificate(node, admin):
    before = state_bytes(node)
    for body, message in [({"host": "admin"}, "fully qualified"), ({"host": 5}, "string"),
                          ({"name": "a.example"}, "body must be"),
                          ({"host": "admin.example.com"}, "no valid certificate")]:
        answer = admin.put("/api/admin-host", body)
        assert answer.status == 400 and answer.json["error"]["field"] == "host"
        assert message in answer.json["error"]["message"], answer.json
    assert state_bytes(node) == before
    cleared = admin.put("/api/admin-host", {"host": None})
    assert cleared.status == 200 and cleared.json["admin_host"] is None
