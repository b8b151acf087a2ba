"""Domains over the admin API against the real daemon: add, check, test, redirect, delete."""

import pytest

from tests.inprocess import node_class
from tests.node import Node
from tests.peers.pebble import ChallTestSrv

pytestmark = pytest.mark.in_process  # HTTP to the App and local peers: no process needed


def _add(admin, host):
    response = admin.post("/api/domains", {"host": host})
    assert response.status == 201, response.body
    return response.json


def test_add_normalises_and_lists(admin):
    record = _add(admin, "Bücher.Example.")
    assert record["host"] == "xn--bcher-kva.example"
    assert record["display"] == "bücher.example"
    assert record["status"] == "pending" and record["redirect"] is None and record["certificate"] is None
    assert record["created_at"].endswith("Z")
    _add(admin, "localhost")
    listed = admin.get("/api/domains").json["domains"]
    assert [d["host"] for d in listed] == ["localhost", "xn--bcher-kva.example"]
    assert admin.get("/api/domains/xn--bcher-kva.example").json["host"] == "xn--bcher-kva.example"
    assert admin.get("/api/domains/nothere.example").error_code == "not_found"
    panel = admin.get("/api/panel").json
    assert [d["host"] for d in panel["domains"]] == ["localhost", "xn--bcher-kva.example"]


@pytest.mark.parametrize("body, field", [
    ({"host": "bad_name.example"}, "host"),
    ({"host": "a" * 64 + ".example"}, "host"),
    ({"host": "127.0.0.1"}, "host"),
    ({"host": ""}, "host"),
    ({"host": 5}, "host"),
    ({}, "host"),
    ({"host": "ok.example", "extra": 1}, "extra"),
])
def test_bad_hosts_refused(admin, body, field):
    response = admin.post("/api/domains", body)
    assert response.status == 400, response.body
    assert response.json["error"]["code"] == "invalid" and response.json["error"]["field"] == field
    assert admin.get("/api/domains").json["domains"] == []


def test_duplicate_is_conflict(admin):
    _add(admin, "dup.example")
    response = admin.post("/api/domains", {"host": "DUP.example."})
    assert response.status == 409 and response.error_code == "conflict"


def test_delete(admin):
    _add(admin, "gone.example")
    assert admin.delete("/api/domains/gone.example").status == 204
    assert admin.get("/api/domains").json["domains"] == []
    assert admin.delete("/api/domains/gone.example").status == 404


def test_check_localhost_through_the_verification_page(admin):
    _add(admin, "localhost")
    response = admin.post("/api/domains/check", {"host": "localhost"})
    assert response.status == 200, response.body
    answer = response.json
    assert answer["host"] == "localhost" and answer["ok"] is True
    assert [s["name"] for s in answer["steps"]] == ["resolve", "fetch", "proof"]
    assert all(s["ok"] and isinstance(s["ms"], (int, float)) for s in answer["steps"])
    record = admin.get("/api/domains/localhost").json
    assert record["status"] == "verified" and record["last_check"]["ok"] is True


def test_check_unknown_domain_is_404(admin):
    assert admin.post("/api/domains/check", {"host": "localhost"}).status == 404


def test_other_nodes_proof_is_rejected(tmp_path, admin, node):
    """The settings point the check at a second node's public port: its proof is not ours."""
    (tmp_path / "other").mkdir()
    other = Node(str(tmp_path / "other")).start()
    try:
        assert admin.put("/api/settings", {"public_port": other.public_port}).status == 200
        _add(admin, "localhost")
        answer = admin.post("/api/domains/check", {"host": "localhost"}).json
        assert answer["ok"] is False
        assert answer["steps"][-1]["name"] == "proof" and "another node" in answer["steps"][-1]["detail"]
        assert admin.get("/api/domains/localhost").json["status"] == "failed"
    finally:
        other.kill()
    assert "event domain_check_failed" in node.log()


@pytest.fixture
def dns_node(request, tmp_path):
    """A node resolving names through pebble-challtestsrv, which knows only shop.example.test."""
    dns = ChallTestSrv(str(tmp_path), default_ipv4="", default_ipv6="")
    dns.add_a("shop.example.test", ["127.0.0.1"])
    (tmp_path / "n").mkdir()
    instance = node_class(request)(str(tmp_path / "n"), env={"CONTENTNODE_DNS_RESOLVER": dns.dns_address}).start()
    client = instance.client()
    assert client.post("/api/setup", {"username": "admin", "password": "correct horse battery staple"}).status == 201
    yield client
    instance.close()
    dns.stop()


def test_unresolvable_name_fails_with_clear_step(dns_node):
    _add(dns_node, "nowhere.example.test")
    answer = dns_node.post("/api/domains/check", {"host": "nowhere.example.test"}).json
    assert answer["ok"] is False
    assert [(s["name"], s["ok"]) for s in answer["steps"]] == [("resolve", False)]
    assert "does not resolve" in answer["steps"][0]["detail"]


def test_name_resolved_by_dns_server_is_verified(dns_node):
    _add(dns_node, "shop.example.test")
    answer = dns_node.post("/api/domains/check", {"host": "shop.example.test"}).json
    assert answer["ok"] is True, answer
    assert "A: 127.0.0.1" in answer["steps"][0]["detail"]


def test_one_resolver_for_check_test_and_diagnose(dns_node):
    """A split-horizon node: the name the DNS server knows resolves in every feature, not only the check."""
    _add(dns_node, "shop.example.test")
    assert dns_node.post("/api/domains/check", {"host": "shop.example.test"}).json["ok"] is True
    tested = dns_node.post("/api/domains/test", {"host": "shop.example.test", "path": "/.well-known/service/check"})
    assert tested.status == 200 and tested.json.get("status") == 400, tested.json  # reached the page (no nonce)
    diagnosed = dns_node.post("/api/diagnose", {"url": "http://shop.example.test/x"}).json
    dns_step = next(s for s in diagnosed["steps"] if s["name"] == "dns")
    assert dns_step["ok"] and "127.0.0.1" in dns_step["detail"], diagnosed


def test_domain_test_reports_what_a_visitor_sees(admin):
    _add(admin, "localhost")
    answer = admin.post("/api/domains/test", {"host": "localhost", "path": "/.well-known/service/check"}).json
    assert answer["status"] == 400  # the page wants a nonce: a visitor without one gets 400
    assert answer["headers"]["content-type"] == "application/json"
    assert answer["url"].startswith("http://localhost:") and "total_ms" in answer["timings"]
    assert "certificate" not in answer
    bad = admin.post("/api/domains/test", {"host": "localhost", "path": "no-slash"})
    assert bad.status == 400 and bad.json["error"]["field"] == "path"


def test_redirects_served_on_the_public_port(admin, node):
    _add(admin, "old.example")
    response = admin.post("/api/domains/redirect", {"host": "old.example", "to": "https://new.example/base/"})
    assert response.status == 200, response.body
    assert response.json["redirect"] == {"to": "https://new.example/base/", "code": 301, "keep_path": True}
    public = node.client("public", host="old.example")
    answer = public.get("/a/b?x=1")
    assert answer.status == 301 and answer.headers["location"] == "https://new.example/base/a/b?x=1"
    # the verification page still answers for the host
    assert public.get("/.well-known/service/check?nonce=" + "n" * 20).status == 200
    # other hosts are not redirected
    assert node.client("public", host="other.example").get("/a").status != 301

    admin.post("/api/domains/redirect", {"host": "old.example", "to": "https://new.example/x?y=1",
                                         "code": 308, "keep_path": False})
    answer = public.get("/deep/path")
    assert answer.status == 308 and answer.headers["location"] == "https://new.example/x?y=1"

    assert admin.post("/api/domains/redirect", {"host": "old.example", "to": None}).json["redirect"] is None
    assert public.get("/a").status != 301


@pytest.mark.parametrize("body, field", [
    ({"host": "r.example", "to": "ftp://x.example/"}, "to"),
    ({"host": "r.example", "to": "javascript:alert(1)"}, "to"),
    ({"host": "r.example", "to": "https://r.example/"}, "to"),
    ({"host": "r.example", "to": "https://x.example/", "code": 303}, "code"),
    ({"host": "r.example", "to": "https://x.example/", "keep_path": "yes"}, "keep_path"),
    ({"host": "r.example"}, "to"),
])
def test_bad_redirects_refused(admin, body, field):
    _add(admin, "r.example")
    response = admin.post("/api/domains/redirect", body)
    assert response.status == 400 and response.json["error"]["field"] == field, response.body
    assert admin.get("/api/domains/r.example").json["redirect"] is None


def test_redirect_for_unknown_domain_is_404(admin):
    assert admin.post("/api/domains/redirect", {"host": "x.example", "to": "https://y.example/"}).status == 404


def test_delete_refused_while_rules_use_it(admin):
    _add(admin, "cdn.example.com")
    bucket = admin.post("/api/buckets", {"name": "b", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                                         "bucket": "media-bucket", "access_key": "a", "secret_key": "s"})
    assert bucket.status == 201, bucket.body
    rule = admin.post("/api/rules", {"domain": "cdn.example.com", "path": "/", "bucket": bucket.json["id"]})
    assert rule.status == 201, rule.body
    refused = admin.delete("/api/domains/cdn.example.com")
    assert refused.status == 409 and refused.error_code == "in_use"
    assert rule.json["id"] in refused.json["error"]["message"]
    assert refused.json["error"]["refs"] == [{"type": "rule", "id": rule.json["id"]}]
    assert admin.get("/api/domains/cdn.example.com").status == 200
    assert admin.delete(f"/api/rules/{rule.json['id']}").status == 204
    assert admin.delete("/api/domains/cdn.example.com").status == 204
