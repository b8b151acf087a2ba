"""Update check core: versions, signature verification, and checks against a
locally served manifest."""

import pytest

from contentnode.core import updates
from contentnode.core.netguard import OutboundPolicy
from tests.peers.update_server import UpdateServer, new_key, payload, sign_manifest, tamper, unsigned

OPEN = OutboundPolicy(allow_private=True)
CHANNELS = {"stable": {"version": "1.4.0", "notes": "Faster cache."},
            "beta": {"version": "1.5.0-beta.2", "notes": "Try this."}}


@pytest.mark.parametrize("lower,higher", [
    ("1.0.0", "1.0.1"), ("1.9.9", "1.10.0"), ("1.2.3-beta.1", "1.2.3"),
    ("1.2.3-alpha", "1.2.3-beta"), ("1.2.3-beta.2", "1.2.3-beta.10"), ("1.2.3-1", "1.2.3-alpha"),
    ("v0.9.0", "1.0.0"),
])
def test_version_order(lower, higher):
    assert updates.parse_version(lower) < updates.parse_version(higher)


def test_build_metadata_is_ignored_and_bad_versions_refused():
    assert updates.parse_version("1.0.0+abc") == updates.parse_version("1.0.0")
    for bad in ("1.0", "one", "", None, "1.0.0-", "1.0.0.0"):
        with pytest.raises(ValueError):
            updates.parse_version(bad)


def test_keys_load_from_pem_and_base64_and_the_shipped_one():
    key, pem = new_key()
    assert updates.load_public_key(pem).public_bytes_raw() == key.public_key().public_bytes_raw()
    import base64
    raw = base64.b64encode(key.public_key().public_bytes_raw()).decode()
    assert updates.load_public_key(raw).public_bytes_raw() == key.public_key().public_bytes_raw()
    der = "".join(pem.strip().splitlines()[1:-1])
    assert updates.load_public_key(der).public_bytes_raw() == key.public_key().public_bytes_raw()
    assert len(updates.shipped_public_key().public_bytes_raw()) == 32
    for bad in ("", "AAAA", "-----BEGIN PUBLIC KEY-----\nxx\n-----END PUBLIC KEY-----"):
        with pytest.raises(ValueError):
            updates.load_public_key(bad)


def test_verify_good_manifest():
    key, pem = new_key()
    doc = updates.verify_manifest(sign_manifest(payload(CHANNELS), key), updates.load_public_key(pem))
    assert doc["channels"]["stable"]["version"] == "1.4.0"


@pytest.mark.parametrize("make,message", [
    (lambda key, other: tamper(sign_manifest(payload(CHANNELS), key)), "signature does not match"),
    (lambda key, other: sign_manifest(payload(CHANNELS), other), "signature does not match"),
    (lambda key, other: unsigned(payload(CHANNELS)), "not signed"),
    (lambda key, other: b"<html>", "not JSON"),
    (lambda key, other: b"[" * 1200, "not JSON"),  # too deep for json.loads: once a RecursionError
    (lambda key, other: b'{"signature": "AA=="}', "no payload"),
    (lambda key, other: b'{"payload": "!!", "signature": "AA=="}', "not base64"),
    (lambda key, other: sign_manifest(payload(CHANNELS, product="other"), key), "not for contentnode"),
    (lambda key, other: sign_manifest({"product": "contentnode"}, key), "no channels"),
])
def test_verify_refuses_bad_manifests(make, message):
    key, pem = new_key()
    other, _ = new_key()
    with pytest.raises(updates.UpdateError) as err:
        updates.verify_manifest(make(key, other), updates.load_public_key(pem))
    assert message in str(err.value)


def test_compare_channels():
    doc = payload(CHANNELS)
    stable = updates.compare(doc, "stable", "1.3.9")
    assert stable["available"] is True and stable["latest"] == "1.4.0" and stable["notes"] == "Faster cache."
    assert updates.compare(doc, "stable", "1.4.0")["available"] is False
    assert updates.compare(doc, "stable", "2.0.0")["available"] is False
    assert updates.compare(doc, "beta", "1.4.0")["available"] is True
    with pytest.raises(updates.UpdateError, match="no 'nightly' channel"):
        updates.compare(doc, "nightly", "1.0.0")
    with pytest.raises(updates.UpdateError, match="bad version"):
        updates.compare(payload({"stable": {"version": "latest"}}), "stable", "1.0.0")


def test_check_against_served_manifests():
    key, pem = new_key()
    public = updates.load_public_key(pem)
    good = sign_manifest(payload(CHANNELS), key)
    with UpdateServer() as server:
        server.files = {"/good.json": (200, good), "/tampered.json": (200, tamper(good)),
                        "/unsigned.json": (200, unsigned(payload(CHANNELS))),
                        "/big.json": (200, b" " * (updates.MAX_MANIFEST_BYTES + 1)),
                        "/moved.json": (302, b"")}
        result = updates.check(server.url("/good.json"), "stable", "1.0.0", public, OPEN)
        assert result["available"] is True and result["latest"] == "1.4.0"
        for path, message in [("/tampered.json", "signature does not match"),
                              ("/unsigned.json", "not signed"), ("/missing.json", "HTTP 404"),
                              ("/big.json", "byte cap"), ("/moved.json", "HTTP 302")]:
            with pytest.raises(updates.UpdateError, match=message):
                updates.check(server.url(path), "stable", "1.0.0", public, OPEN)
        with pytest.raises(updates.UpdateError, match="private or loopback"):
            updates.check(server.url("/good.json"), "stable", "1.0.0", public,
                          OutboundPolicy(allow_private=False))
