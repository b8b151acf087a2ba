"""The public verification page: HMAC proof of the nonce under the node's own secret."""

import hashlib
import hmac
import json
import os

import pytest

pytestmark = pytest.mark.in_process  # HTTP to the App; the restart runs a daemon process


def node_secret(node):
    with open(os.path.join(node.data_dir, "state.json")) as f:
        doc = json.load(f)
    return doc["node"]["id"], bytes.fromhex(doc["node"]["secret"])


def test_proof_is_hmac_of_nonce(node):
    node_id, secret = node_secret(node)
    nonce = "Abc-_0123456789xyz"
    r = node.client("public").get(f"/.well-known/service/check?nonce={nonce}")
    assert r.status == 200
    assert r.json == {"node": node_id, "nonce": nonce,
                      "proof": hmac.new(secret, nonce.encode(), hashlib.sha256).hexdigest()}


@pytest.mark.daemon_process
def test_secret_survives_restart_and_differs_between_nodes(node, tmp_path_factory):
    from tests.node import Node
    first = node_secret(node)
    node.restart()
    assert node_secret(node) == first
    other = Node(str(tmp_path_factory.mktemp("other"))).start()
    try:
        nonce = "n" * 20
        a = node.client("public").get(f"/.well-known/service/check?nonce={nonce}").json["proof"]
        b = other.client("public").get(f"/.well-known/service/check?nonce={nonce}").json["proof"]
        assert a != b
    finally:
        other.kill()


@pytest.mark.parametrize("query", ["", "?nonce=", "?nonce=short", "?nonce=" + "a" * 129, "?nonce=abcdefghijklmnop%2F",
                                   "?nonce=abcdefghijklmnop.q"])
def test_bad_nonce_is_400(node, query):
    r = node.client("public").get("/.well-known/service/check" + query)
    assert r.status == 400 and r.error_code == "invalid" and r.json["error"]["field"] == "nonce"


def test_other_public_paths_404_and_no_secret_anywhere(node):
    _, secret = node_secret(node)
    r = node.client("public").get("/anything")
    assert r.status == 404 and r.error_code == "not_found"
    assert secret.hex() not in node.log()
