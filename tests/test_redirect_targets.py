"""Issue 12 item 7: redirect targets are stored in ASCII form, and a response that cannot be
written is a logged 500, never a silently dropped connection."""

import json
import os

import pytest

from tests.test_wire import raw_request

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed


def _public_get(node, host):
    return raw_request(node.public_port, f"GET /some/path HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                       .encode())


def test_unicode_redirect_target_is_normalised_and_served(node, admin):
    assert admin.post("/api/domains", {"host": "old.example"}).status == 201
    r = admin.post("/api/domains/redirect", {"host": "old.example", "to": "https://例え.jp/€"})
    assert r.status == 200, r.body
    assert r.json["redirect"]["to"] == "https://xn--r8jz45g.jp/%E2%82%AC"
    reply = _public_get(node, "old.example")
    assert reply.startswith(b"HTTP/1.1 301 ")
    assert b"\r\nLocation: https://xn--r8jz45g.jp/%E2%82%AC/some/path\r\n" in reply


def test_a_header_that_cannot_be_sent_is_a_logged_500_on_the_public_port(node, admin):
    """A target stored before normalisation (an old state file) must not end connections silently."""
    assert admin.post("/api/domains", {"host": "old.example"}).status == 201
    node.stop()
    path = os.path.join(node.data_dir, "state.json")
    with open(path) as f:
        doc = json.load(f)
    doc["domains"]["old.example"]["redirect"] = {"to": "https://例え.jp/€", "code": 301, "keep_path": True}
    with open(path, "w") as f:
        json.dump(doc, f)
    node.start()
    reply = _public_get(node, "old.example")
    assert reply.startswith(b"HTTP/1.1 500 ") and b'"internal"' in reply
    assert node.log().count("cannot be sent") == 1
