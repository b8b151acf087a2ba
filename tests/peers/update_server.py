"""A local update server: serves manifest files over HTTP on a free loopback
port, plus the release side's signing helper the tests use to make them."""

import base64
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.peers.stub import LoopbackServer, QuietHandler


def new_key():
    """(private key, public key PEM text)."""
    key = Ed25519PrivateKey.generate()
    pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return key, pem


def payload(channels, product="contentnode", issued_at="2026-01-01T00:00:00Z"):
    return {"product": product, "issued_at": issued_at, "channels": channels}


def sign_manifest(document, key):
    """The manifest as the release process publishes it."""
    raw = json.dumps(document).encode()
    return json.dumps({"payload": base64.b64encode(raw).decode(),
                       "signature": base64.b64encode(key.sign(raw)).decode()}).encode()


def tamper(manifest):
    """The same signature over a payload with a different version."""
    envelope = json.loads(manifest)
    document = json.loads(base64.b64decode(envelope["payload"]))
    for entry in document["channels"].values():
        entry["version"] = "99.0.0"
    envelope["payload"] = base64.b64encode(json.dumps(document).encode()).decode()
    return json.dumps(envelope).encode()


def unsigned(document):
    return json.dumps({"payload": base64.b64encode(json.dumps(document).encode()).decode()}).encode()


class UpdateServer:
    """files: {path: (status, bytes)}; changeable while running."""

    def __init__(self):
        self.files = {}
        self.requests = []
        self._server = None

    def url(self, path):
        return self._server.url + path

    def start(self):
        peer = self

        class Handler(QuietHandler):
            def do_GET(self):
                peer.requests.append(self.path)
                status, body = peer.files.get(self.path, (404, b'{"error": "not found"}'))
                self.reply(status, body, "application/json")

        self._server = LoopbackServer(Handler, name="update-server")
        return self

    def stop(self):
        self._server.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
