"""The ACME client against a real pebble (with pebble-challtestsrv as its DNS)."""

import functools
import json
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from contentnode.core import acme, certs
from contentnode.core.netguard import OutboundPolicy, fetch
from tests.certgen import new_key
from tests.peers.pebble import Pebble
from tests.peers.stub import LoopbackServer, QuietHandler


class _ChallengeServer(LoopbackServer):
    """A minimal public port: answers /.well-known/acme-challenge/<token> from a store."""

    def __init__(self, store):
        prefix = "/.well-known/acme-challenge/"
        hits = self.hits = []

        class Handler(QuietHandler):
            def do_GET(handler):
                answer = store.get(handler.path[len(prefix):]) if handler.path.startswith(prefix) else None
                hits.append((handler.headers.get("Host"), handler.path))
                handler.reply(200 if answer else 404, (answer or "not found").encode())

        super().__init__(Handler)


@pytest.fixture
def acme_env(tmp_path):
    store = acme.ChallengeStore()
    web = _ChallengeServer(store)
    pebble = Pebble(str(tmp_path)).start(web.port)
    yield pebble, store, web
    pebble.stop()
    web.stop()


def _client(pebble, key):
    bound = functools.partial(fetch, policy=OutboundPolicy(), ssl_context=pebble.tls_context())
    return acme.AcmeClient(pebble.directory_url, key, bound, contact="ops@example.com")


@pytest.mark.parametrize("kind", ["ec", "rsa"])
def test_issue_end_to_end(acme_env, kind):
    pebble, store, web = acme_env
    client = _client(pebble, new_key(kind))
    cert_key, _ = certs.new_key_pem()
    chain_pem = client.issue(["shop.example.test"], store, cert_key)
    chain = x509.load_pem_x509_certificates(chain_pem.encode())
    assert certs.dns_names(chain[0]) == ["shop.example.test"]
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    assert chain[0].public_key().public_bytes(*spki) == cert_key.public_key().public_bytes(*spki)
    # pebble really fetched the challenge through our server, with the domain as Host
    assert any(host.split(":")[0] == "shop.example.test" and "acme-challenge" in path for host, path in web.hits)
    # the token is gone once the order is done
    assert all(store.get(path.rsplit("/", 1)[-1]) is None for _, path in web.hits)
    # the chain validates up to pebble's intermediate (leaf first, in order)
    for child, parent in zip(chain, chain[1:]):
        child.verify_directly_issued_by(parent)


def test_failed_challenge_is_reported(acme_env):
    pebble, _, _ = acme_env
    empty_store = acme.ChallengeStore()
    client = _client(pebble, new_key())
    # the challenge server answers from a different (empty) store: validation must fail
    with pytest.raises(acme.AcmeError) as caught:
        client.issue(["broken.example.test"], empty_store, certs.new_key_pem()[0])
    assert caught.value.step == "challenge"
    assert "invalid" in caught.value.message


def test_account_key_created_0600_and_reused(tmp_path):
    path = str(tmp_path / "acme" / "account.pem")
    key = acme.load_account_key(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    again = acme.load_account_key(path)
    assert acme.thumbprint(key) == acme.thumbprint(again)


def test_jwk_and_thumbprint_are_canonical():
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = acme.jwk(key)
    assert list(jwk) == ["crv", "kty", "x", "y"]
    assert len(acme.thumbprint(key)) == 43 and "=" not in acme.thumbprint(key)
    signature = acme.sign(key, b"data")
    assert len(signature) == 64 and acme.algorithm(key) == "ES256"
    rsa_key = new_key("rsa")
    assert acme.algorithm(rsa_key) == "RS256" and list(acme.jwk(rsa_key)) == ["e", "kty", "n"]


def test_unreachable_directory_is_an_acme_error():
    bound = functools.partial(fetch, policy=OutboundPolicy(), timeout=2)
    client = acme.AcmeClient("http://127.0.0.1:1/dir", new_key(), bound)
    with pytest.raises(acme.AcmeError) as caught:
        client.account()
    assert caught.value.step == "directory"


def test_directory_must_be_json_with_the_urls(acme_env):
    pebble, _, _ = acme_env
    bound = functools.partial(fetch, policy=OutboundPolicy(), ssl_context=pebble.tls_context())
    # the management root endpoint is PEM, not a directory
    client = acme.AcmeClient(f"https://127.0.0.1:{pebble.management_port}/roots/0", new_key(), bound)
    with pytest.raises(acme.AcmeError) as caught:
        client.directory()
    assert caught.value.step == "directory"
    assert json.dumps(caught.value.message)
