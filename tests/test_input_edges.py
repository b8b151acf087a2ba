"""Inputs at their edges (issue 25, items 5 and 6): answers the HTTP parser gives
itself carry the admin port's security headers, text is refused rather than
silently trimmed of control characters, and a raw (unencoded) invalid UTF-8
path on the public port is refused like its percent-encoded form, never
reaching the origin."""

import json

import pytest

from tests.content_setup import Site
from tests.inprocess import InProcessNode
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_wire import raw_request

pytestmark = pytest.mark.in_process

SECURITY = {"content-security-policy", "x-content-type-options", "x-frame-options", "referrer-policy"}
TLS_CLIENT_HELLO = bytes.fromhex("16030100c8010000c40303") + b"\x00" * 32 + b"\x00\x00\x02\x13\x01\x01\x00\r\n\r\n"


def _head(reply: bytes) -> tuple[int, dict]:
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(head[0].split(" ")[1]), headers


@pytest.mark.parametrize("raw,status", [
    (b"GET /healthz HTTP/1.1 extra\r\nHost: localhost\r\n\r\n", 400),         # bad request line
    (b"GET http://localhost/healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", 400),  # absolute-form target
    (b"GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),                    # bad header line
    (TLS_CLIENT_HELLO, 400),                                                  # TLS on the plain port
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431),
    (b"GET /healthz HTTP/2.0\r\nHost: localhost\r\n\r\n", 505),
    (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
])
def test_parser_answers_on_the_admin_port_carry_the_security_headers(node, raw, status):
    reply = raw_request(node.admin_port, raw)
    got, headers = _head(reply)
    assert got == status, reply[:200]
    assert SECURITY <= set(headers), headers
    assert headers["content-security-policy"].startswith("default-src 'self'")
    assert headers["x-content-type-options"] == "nosniff"
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"]


def test_a_handler_answer_carries_the_headers_once(node):
    reply = raw_request(node.admin_port, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    assert reply.lower().count(b"content-security-policy:") == 1


@pytest.mark.parametrize("host", ["\u2028x.example", "x.example\u2029", "\u0085x.example", "\tx.example",
                                  "x\u200b.example", "stra\u00dfe.example", "\uff58.example"])
def test_a_host_is_refused_not_silently_rewritten(admin, host):
    """"\\u2028x.example" was stored as x.example: separators were stripped, IDNA mapping dropped or
    changed characters (a zero-width space, ß to ss, a full-width x)."""
    answer = admin.post("/api/domains", {"host": host})
    assert answer.status == 400 and answer.json["error"] == {
        "code": "invalid", "field": "host", "message": answer.json["error"]["message"]}, answer.body
    assert admin.get("/api/domains").json["domains"] == []


def test_hosts_that_only_change_case_dot_or_spaces_still_normalise(admin):
    for sent, stored in [(" Www.Example.COM. ", "www.example.com"), ("b\u00fccher.example", "xn--bcher-kva.example")]:
        answer = admin.post("/api/domains", {"host": sent})
        assert answer.status == 201 and answer.json["host"] == stored, answer.body


@pytest.mark.parametrize("path,body,field", [
    ("/api/buckets", {"name": "\u2028edge", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                      "bucket": "bucket-one", "access_key": "k", "secret_key": "s"}, "name"),
    ("/api/buckets", {"name": "edge\u0085", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                      "bucket": "bucket-one", "access_key": "k", "secret_key": "s"}, "name"),
    ("/api/settings", {"node_name": "\u2028node"}, "node_name"),
    ("/api/settings", {"node_name": "no\u2029de"}, "node_name"),
    ("/api/settings", {"node_name": "node\x85"}, "node_name"),
    ("/api/notifications", {"telegram": {"chat_id": "\u2028123"}}, "telegram.chat_id"),
])
def test_text_fields_refuse_separators_at_their_ends_too(admin, path, body, field):
    method = admin.post if path == "/api/buckets" else admin.put
    before = admin.get("/api/settings").json, admin.get("/api/buckets").json
    answer = method(path, body)
    assert answer.status == 400 and answer.json["error"]["field"] == field, answer.body
    assert (admin.get("/api/settings").json, admin.get("/api/buckets").json) == before


def test_a_token_name_refuses_a_line_separator(admin):
    from tests.node import ADMIN_PASSWORD

    answer = admin.post("/api/me/tokens", {"name": "cron\u2028x", "scopes": ["domains:read"],
                                           "password": ADMIN_PASSWORD})
    assert answer.status == 400 and answer.json["error"]["field"] == "name", answer.body


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("edges")), seaweed, node_class=InProcessNode)
    instance.add_rule("/static", prefix="site/")
    yield instance
    instance.close()


def _get_raw(site, raw_path: bytes) -> tuple[int, bytes]:
    reply = raw_request(site.node.public_port, b"GET " + raw_path + b" HTTP/1.1\r\nHost: " + site.host.encode()
                        + b"\r\nConnection: close\r\n\r\n")
    return _head(reply)[0], reply.split(b"\r\n\r\n", 1)[1]


def test_a_raw_invalid_utf8_path_is_refused_like_its_encoded_form(site):
    encoded = _get_raw(site, b"/static/%ff%fe.txt")
    raw = _get_raw(site, b"/static/\xff\xfe.txt")
    assert encoded[0] == 400 and raw == encoded, (raw, encoded)
    assert site.seaweed.count("GET", contains=f"/{site.bucket}/site/") == 0  # neither reached the origin


def test_a_raw_utf8_path_is_served_like_its_encoded_form(site):
    site.put("site/caf\u00e9.txt", b"coffee", "text/plain")
    raw = _get_raw(site, "/static/caf\u00e9.txt".encode())
    encoded = _get_raw(site, b"/static/caf%C3%A9.txt")
    assert raw == encoded == (200, b"coffee")
