"""A rule's edge controls against the real daemon and an origin that counts its requests
(tests/origin_server.py): each refusal comes before any origin request, is counted in the
metrics by reason and named in the access line."""

import http.client
import re

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.origin_server import OriginServer
from tests.test_access_log import access_lines, fields
from tests.test_metrics_endpoint import sample, scrape
from tests.test_public_workers import wait_until

pytestmark = pytest.mark.daemon_process
HOST = "edge.example.test"


@pytest.fixture
def origin():
    with OriginServer() as server:
        server.script("/f*", b"fresh", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"})
        yield server


def site(admin, origin, **rule):
    bucket = admin.post("/api/buckets", {"name": "edge", "type": "http", "url": origin.url})
    assert bucket.status == 201, bucket.body
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    made = admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket.json["id"], **rule})
    assert made.status == 201, made.body
    return made.json


def fetch(port, path, forwarded=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Host": HOST, **({"X-Forwarded-For": forwarded} if forwarded else {})}
        conn.request(method, path, headers=headers)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def refusals(node, reason):
    return sample(scrape(node), "contentnode_public_refusals_total", reason=reason)


# ---------------------------------------------------------------- access


def test_access_is_stored_normalised_and_countries_name_the_missing_database(node, admin, origin):
    rule = site(admin, origin, access={"allow": ["10.1.2.3/8", "2001:db8::1/32"], "deny": []})
    assert rule["access"] == {"allow": ["10.0.0.0/8", "2001:db8::/32"], "deny": []}
    assert admin.get(f"/api/rules/{rule['id']}").json["access"] == rule["access"]
    countries = admin.post("/api/rules", {"domain": HOST, "path": "/c", "bucket": rule["bucket"],
                                          "access": {"countries": {"deny": ["DE"]}}})
    assert countries.status == 400 and countries.json["error"]["field"] == "access.countries"
    message = countries.json["error"]["message"]
    assert "geoip_db" in message and "maxminddb" in message
    bad = admin.post("/api/rules", {"domain": HOST, "path": "/b", "bucket": rule["bucket"],
                                    "access": {"deny": ["10.0.0.0/40"]}})
    assert bad.status == 400 and bad.json["error"]["field"] == "access.deny"
    assert admin.post("/api/rules", {"domain": HOST, "path": "/u", "bucket": rule["bucket"],
                                     "access": {"block": []}}).json["error"]["field"] == "access.block"
    assert sorted(r["path"] for r in admin.get("/api/rules").json["rules"]) == ["/"]   # nothing else saved
    plain = admin.post("/api/rules", {"domain": HOST, "path": "/p", "bucket": rule["bucket"]})
    assert plain.json["access"] is None


def test_a_refused_address_never_reaches_the_origin(node, admin, origin):
    site(admin, origin, access={"allow": ["10.0.0.0/8"], "deny": ["10.9.0.0/16"]})
    status, _, body = fetch(node.public_port, "/f1")
    assert status == 403 and b'"forbidden_address"' in body
    assert fetch(node.public_port, "/f1", method="HEAD")[0] == 403
    assert origin.requests_for("/f1") == []
    # through a trusted proxy the client is the forwarded address
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    assert fetch(node.public_port, "/f1", "10.1.2.3")[:3:2] == (200, b"fresh")
    assert fetch(node.public_port, "/f1", "10.9.8.7")[0] == 403      # deny wins over allow
    assert fetch(node.public_port, "/f1", "192.0.2.1")[0] == 403
    assert len(origin.requests_for("/f1")) == 1
    assert wait_until(lambda: refusals(node, "forbidden_address") == 4, 5)
    assert wait_until(lambda: len(access_lines(node.log())) >= 5, 5)
    lines = [fields(line) for line in access_lines(node.log()) if "port=public" in line]
    assert [(f["client"], f["status"], f.get("refused")) for f in lines] == [
        ("127.0.0.1", "403", "forbidden_address"), ("127.0.0.1", "403", "forbidden_address"),
        ("10.1.2.3", "200", None), ("10.9.8.7", "403", "forbidden_address"),
        ("192.0.2.1", "403", "forbidden_address")]


def test_a_deny_list_alone_lets_everyone_else_in(node, admin, origin):
    site(admin, origin, access={"deny": ["192.0.2.0/24"]})
    assert fetch(node.public_port, "/f2")[0] == 200
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    assert fetch(node.public_port, "/f2", "192.0.2.77")[0] == 403
    assert fetch(node.public_port, "/f2", "::ffff:192.0.2.77")[0] == 403   # an IPv4 client on a dual-stack socket
    assert fetch(node.public_port, "/f2", "198.51.100.1")[0] == 200
    assert len(origin.requests_for("/f2")) == 1
