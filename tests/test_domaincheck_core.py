"""Domain check steps against a real DNS peer (pebble-challtestsrv) and local pages."""

import hashlib
import hmac
import json
from urllib.parse import parse_qs, urlsplit

import pytest

from contentnode.core import dns as dns_client
from contentnode.core import domaincheck, verify
from contentnode.core.netguard import OutboundPolicy
from tests.peers.pebble import ChallTestSrv
from tests.peers.stub import LoopbackServer, QuietHandler


def _proof(secret, nonce):
    return hmac.new(secret, nonce.encode(), hashlib.sha256).hexdigest()


class _Page(LoopbackServer):
    """A public port stand-in answering the verification page under one secret."""

    def __init__(self, secret, node="node-a"):
        hosts = self.hosts = []

        class Handler(QuietHandler):
            def do_GET(h):
                hosts.append(h.headers.get("Host"))
                parts = urlsplit(h.path)
                nonce = parse_qs(parts.query).get("nonce", [""])[0]
                if parts.path != verify.CHECK_PATH:
                    status, body = 404, b'{"error":{"code":"not_found","message":"no"}}'
                else:
                    status, body = 200, json.dumps({"node": node, "nonce": nonce,
                                                    "proof": _proof(secret, nonce)}).encode()
                h.reply(status, body, "application/json")

        super().__init__(Handler)


@pytest.fixture
def page():
    p = _Page(b"secret-a")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def dns(tmp_path_factory):
    server = ChallTestSrv(str(tmp_path_factory.mktemp("dns")), default_ipv4="", default_ipv6="")
    server.add_a("shop.example.test", ["127.0.0.1"])
    yield server
    server.stop()


def _names(steps):
    return [(s["name"], s["ok"]) for s in steps.items]


def test_localhost_passes(page):
    steps = domaincheck.check_domain("localhost", "http", page.port, b"secret-a", OutboundPolicy())
    assert steps.ok, steps.items
    assert _names(steps) == [("resolve", True), ("fetch", True), ("proof", True)]
    assert "127.0.0.1" in steps.items[0]["detail"]
    assert all(isinstance(s["ms"], float) for s in steps.items)
    assert page.hosts[-1] == f"localhost:{page.port}"


def test_other_nodes_proof_fails(page):
    steps = domaincheck.check_domain("localhost", "http", page.port, b"secret-b", OutboundPolicy())
    assert not steps.ok
    assert _names(steps)[-1] == ("proof", False)
    assert "another node (node-a)" in steps.items[-1]["detail"]


def test_nothing_listening_fails_at_fetch():
    from tests.peers.pebble import free_port
    steps = domaincheck.check_domain("localhost", "http", free_port(), b"x", OutboundPolicy())
    assert _names(steps) == [("resolve", True), ("fetch", False)]
    assert "refused" in steps.items[-1]["detail"]


def test_resolution_through_dns_server(dns, page):
    steps = domaincheck.check_domain("shop.example.test", "http", page.port, b"secret-a",
                                     OutboundPolicy(dns_server=dns.dns_address))
    assert steps.ok, steps.items
    assert page.hosts[-1] == f"shop.example.test:{page.port}"


def test_unresolvable_name_fails_with_clear_step(dns):
    steps = domaincheck.check_domain("nowhere.example.test", "http", 80, b"x",
                                     OutboundPolicy(dns_server=dns.dns_address))
    assert _names(steps) == [("resolve", False)]
    assert "does not resolve" in steps.items[0]["detail"]


def test_dns_records(dns):
    assert dns_client.resolve("shop.example.test", dns.dns_address) == {"A": ["127.0.0.1"], "AAAA": []}


def test_every_outbound_request_resolves_through_the_named_dns_server(dns, page):
    """Not only the domain check: the shared outbound guard uses the same resolver (visit = domain test)."""
    result = domaincheck.visit(f"http://shop.example.test:{page.port}/", "shop.example.test",
                               OutboundPolicy(dns_server=dns.dns_address))
    assert "status" in result and "error" not in result, result
    assert page.hosts[-1] == f"shop.example.test:{page.port}"


def test_dead_dns_server_is_reported():
    from tests.peers.pebble import free_port
    with pytest.raises(dns_client.ResolveError, match="did not answer|failed"):
        dns_client.resolve("a.example", f"127.0.0.1:{free_port(udp_too=True)}")


def test_not_a_verification_page(page):
    steps = domaincheck.check_domain("localhost", "http", page.port, b"x", OutboundPolicy())
    assert _names(steps)[-1] == ("proof", False)
    result = domaincheck._judge_proof(b"<html>", "n" * 20, b"x")
    assert result == (False, "the page is not a verification page of a contentnode")
    assert domaincheck._judge_proof(b'{"proof":"a","nonce":"other"}', "n" * 20, b"a")[0] is False
    good = json.dumps({"node": "me", "nonce": "n" * 20, "proof": _proof(b"k", "n" * 20)}).encode()
    assert domaincheck._judge_proof(good, "n" * 20, b"k") == (True, "the proof matches this node")


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:5353", ("127.0.0.1", 5353)), ("10.0.0.1", ("10.0.0.1", 53)),
    ("[::1]:53", ("::1", 53)), ("::1", ("::1", 53)),
])
def test_parse_server(text, expected):
    assert dns_client.parse_server(text) == expected


def test_visit_reports_status_and_headers(page):
    result = domaincheck.visit(f"http://localhost:{page.port}/nothing", "localhost", OutboundPolicy())
    assert result["status"] == 404 and result["ok"] is False
    assert result["headers"]["content-type"] == "application/json"
    assert "total_ms" in result["timings"] and "certificate" not in result
    dead = domaincheck.visit("http://localhost:1/", "localhost", OutboundPolicy())
    assert dead["error"]["step"] == "connect"
