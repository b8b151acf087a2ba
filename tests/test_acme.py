"""ACME issuance end to end: the node orders from a real pebble, serves HTTP-01 on its
public port, installs the chain, serves it over HTTPS (verified against pebble's root),
picks up a re-issue without a restart, and stops the TLS listener when HTTPS is turned off."""

import os
import time

import pytest

from contentnode.clock import parse_rfc3339

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.peers.pebble import Pebble, free_port
from tests.tlsclient import fetch_over_tls

HOST = "shop.example.test"


@pytest.fixture
def acme_node(tmp_path):
    yield from _acme_node(tmp_path)


@pytest.fixture
def acme_node_with_workers(tmp_path):
    yield from _acme_node(tmp_path, {"CONTENTNODE_PUBLIC_WORKERS": "2"})


def _acme_node(tmp_path, env=None):
    """A node that trusts pebble's listener and resolves names through pebble's DNS (127.0.0.1)."""
    (tmp_path / "node").mkdir()
    pebble = Pebble(str(tmp_path))
    node = None
    try:
        node = Node(str(tmp_path / "node"), env={"SSL_CERT_FILE": pebble.ca_file,
                                                  "CONTENTNODE_DNS_RESOLVER": pebble.dns.dns_address,
                                                  **(env or {})}).start()
        pebble.start(node.public_port)
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        assert admin.put("/api/settings", {"acme_directory": pebble.directory_url,
                                           "acme_email": "ops@example.com"}).status == 200
        yield node, admin, pebble
    finally:
        if node:
            node.kill()
        pebble.stop()


def test_issue_serve_reissue_and_turn_off(acme_node):
    node, admin, pebble = acme_node
    assert admin.post("/api/domains", {"host": HOST}).status == 201

    response = admin.post("/api/certs/issue", {"host": HOST})
    assert response.status == 200, response.body
    first = response.json
    assert first["host"] == HOST and first["sans"] == [HOST] and first["source"] == "acme"
    assert "Pebble" in first["issuer"] and len(first["fingerprint"]) == 64
    record = admin.get(f"/api/domains/{HOST}").json
    assert record["status"] == "verified" and record["certificate"]["fingerprint"] == first["fingerprint"]
    assert "PRIVATE" not in admin.get(f"/api/domains/{HOST}").body.decode()

    https = admin.put("/api/https", {"enabled": True, "port": 0})
    assert https.status == 200, https.body
    port = https.json["listening_port"]
    assert port and https.json["hosts_with_certificates"] == [HOST]

    root = pebble.issuing_root_pem()
    fingerprint, answer = fetch_over_tls(port, HOST, "/.well-known/service/check?nonce=" + "n" * 24, cadata=root)
    assert fingerprint == first["fingerprint"]
    assert answer.startswith(b"HTTP/1.1 200") and b'"proof"' in answer

    # a re-issue is used for new connections without a restart
    second = admin.post("/api/certs/issue", {"host": HOST})
    assert second.status == 200, second.body
    assert second.json["fingerprint"] != first["fingerprint"]
    assert fetch_over_tls(port, HOST, cadata=root)[0] == second.json["fingerprint"]

    # HTTPS off stops the listener
    off = admin.put("/api/https", {"enabled": False})
    assert off.status == 200 and off.json["listening_port"] is None
    with pytest.raises(ConnectionRefusedError):
        fetch_over_tls(port, HOST, cadata=root)


def test_issue_through_public_workers(acme_node_with_workers):
    """With public workers the CA's HTTP-01 request (and the domain check before it) reaches a
    worker process, not the daemon that holds the order: the challenge must be answerable there."""
    node, admin, pebble = acme_node_with_workers
    assert "public port served by 2 worker processes" in node.log()
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    response = admin.post("/api/certs/issue", {"host": HOST})
    assert response.status == 200, response.body
    assert response.json["source"] == "acme" and "Pebble" in response.json["issuer"]
    challenges = os.path.join(node.data_dir, "acme-challenges")
    assert os.listdir(challenges) == []  # answered tokens are removed


def test_issue_refused_when_the_domain_check_fails(acme_node):
    node, admin, pebble = acme_node
    # the check is pointed at a port where nothing listens
    assert admin.put("/api/settings", {"public_port": free_port()}).status == 200
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    response = admin.post("/api/certs/issue", {"host": HOST})
    assert response.status == 409, response.body
    assert response.json["error"]["code"] == "domain_check_failed"
    assert [s["name"] for s in response.json["steps"]] == ["resolve", "fetch"]
    assert response.json["steps"][-1]["ok"] is False
    assert admin.get(f"/api/domains/{HOST}").json["certificate"] is None


def test_issue_for_unknown_domain_is_404(acme_node):
    _, admin, _ = acme_node
    assert admin.post("/api/certs/issue", {"host": "unknown.example.test"}).status == 404
    assert admin.post("/api/certs/issue", {"host": "bad host"}).status == 400


def test_renewal_close_to_expiry(acme_node):
    node, admin, pebble = acme_node
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    first = admin.post("/api/certs/issue", {"host": HOST}).json
    # move the node's clock to 20 days before expiry and restart it on the same public port
    node.set_clock_offset(parse_rfc3339(first["not_after"]) - time.time() - 20 * 86400)
    node.args = ["--public-port", str(node.public_port)]
    node.restart()
    deadline = time.monotonic() + 60
    renewed = None
    while time.monotonic() < deadline and renewed is None:
        time.sleep(0.5)
        if admin.login(ADMIN_USER, ADMIN_PASSWORD).status == 200:
            current = admin.get(f"/api/domains/{HOST}").json["certificate"]
            if current["fingerprint"] != first["fingerprint"]:
                renewed = current
    assert renewed is not None, node.log()[-3000:]
    assert renewed["source"] == "acme" and renewed["installed_at"] > first["installed_at"]
    with open(os.path.join(node.data_dir, "audit.jsonl")) as f:
        assert '"cert.renew"' in f.read()
