"""core/signing: link signing, verification and key rotation with a grace period."""

from urllib.parse import parse_qs, urlsplit

import pytest

from contentnode.core import signing

NOW = 1_800_000_000.0
HOST, PATH = "cdn.example.com", "/video/a b.mp4"


def params_of(url):
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@pytest.fixture
def ring():
    return signing.ensure_key(None, NOW)


def test_a_fresh_ring_has_one_current_key(ring):
    assert ring["current"] in ring["keys"] and len(ring["keys"]) == 1
    assert signing.ensure_key(ring, NOW) is ring


def test_valid_link_verifies(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    assert set(params) == {"exp", "kid", "sig"}
    assert signing.verify(ring, HOST, PATH, params, NOW) == (True, "ok")
    assert signing.verify(ring, "CDN.Example.com.", PATH, params, NOW) == (True, "ok")


def test_signed_url_round_trip_uses_the_decoded_path(ring):
    url = signing.signed_url(ring, "https://cdn.example.com:8443/video/a%20b.mp4?w=200&sig=old", int(NOW) + 60)
    parts = urlsplit(url)
    assert parts.netloc == "cdn.example.com:8443" and parts.path == "/video/a%20b.mp4"
    params = params_of(url)
    assert params["w"] == "200" and params["sig"] != "old"
    assert signing.verify(ring, HOST, PATH, params, NOW) == (True, "ok")


def test_expired_link_is_refused(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    assert signing.verify(ring, HOST, PATH, params, NOW + 59) == (True, "ok")
    assert signing.verify(ring, HOST, PATH, params, NOW + 60) == (False, "expired")


@pytest.mark.parametrize("field,value", [
    ("exp", str(int(NOW) + 999_999)), ("sig", "A" * 43), ("sig", ""), ("kid", "deadbeef"),
    ("exp", "12x"), ("sig", "\u00e9" * 43)])
def test_tampered_link_is_refused(ring, field, value):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    params[field] = value
    ok, reason = signing.verify(ring, HOST, PATH, params, NOW)
    assert ok is False and reason in ("bad_signature", "unknown_key", "malformed", "missing")


def test_one_flipped_signature_character_is_refused(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    sig = params["sig"]
    params["sig"] = sig[:-1] + ("A" if sig[-1] != "A" else "B")
    assert signing.verify(ring, HOST, PATH, params, NOW) == (False, "bad_signature")


def test_other_path_and_other_host_are_refused(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    assert signing.verify(ring, HOST, "/video/other.mp4", params, NOW) == (False, "bad_signature")
    assert signing.verify(ring, HOST, PATH + "x", params, NOW) == (False, "bad_signature")
    assert signing.verify(ring, "evil.example.com", PATH, params, NOW) == (False, "bad_signature")


def test_missing_parameters(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60)
    for name in ("exp", "kid", "sig"):
        partial = {k: v for k, v in params.items() if k != name}
        assert signing.verify(ring, HOST, PATH, partial, NOW) == (False, "missing")
    assert signing.verify(None, HOST, PATH, params, NOW) == (False, "unknown_key")


def test_client_address_binding(ring):
    params = signing.sign(ring, HOST, PATH, int(NOW) + 60, client_ip="2001:db8::0001")
    assert params["ip"] == "2001:db8::1"
    assert signing.verify(ring, HOST, PATH, params, NOW, client_ip="2001:db8::1") == (True, "ok")
    assert signing.verify(ring, HOST, PATH, params, NOW, client_ip="2001:db8::2") == (False, "ip_mismatch")
    assert signing.verify(ring, HOST, PATH, params, NOW) == (False, "ip_mismatch")
    unbound = dict(params)
    del unbound["ip"]
    assert signing.verify(ring, HOST, PATH, unbound, NOW, client_ip="2001:db8::1") == (False, "bad_signature")
    moved = dict(params, ip="198.51.100.1")
    assert signing.verify(ring, HOST, PATH, moved, NOW, client_ip="198.51.100.1") == (False, "bad_signature")
    assert signing.verify(ring, HOST, PATH, dict(params, ip="not-an-ip"), NOW) == (False, "malformed")


def test_rotation_keeps_the_previous_key_for_the_grace_period(ring):
    old = signing.sign(ring, HOST, PATH, int(NOW) + 10 * 86400)
    rotated, new_kid, previous = signing.rotate(ring, NOW, grace=3600)
    assert previous == ring["current"] and new_kid != previous and rotated["current"] == new_kid
    assert ring["keys"][previous]["retires_at"] is None  # the input ring is not changed
    fresh = signing.sign(rotated, HOST, PATH, int(NOW) + 60)
    assert fresh["kid"] == new_kid
    assert signing.verify(rotated, HOST, PATH, old, NOW + 3599) == (True, "ok")
    assert signing.verify(rotated, HOST, PATH, fresh, NOW + 30) == (True, "ok")
    assert signing.verify(rotated, HOST, PATH, old, NOW + 3600) == (False, "unknown_key")


def test_rotation_prunes_retired_keys_and_grace_zero_retires_at_once(ring):
    r1, k1, _ = signing.rotate(ring, NOW, grace=10)
    r2, k2, prev = signing.rotate(r1, NOW + 20, grace=10)
    assert prev == k1 and set(r2["keys"]) == {k1, k2}  # the very first key retired at NOW + 10
    r3, k3, _ = signing.rotate(r2, NOW + 21, grace=0)
    assert set(r3["keys"]) == {k1, k3}  # k1 verifies until NOW + 30, k2 retired at once
    old = signing.sign(r2, HOST, PATH, int(NOW) + 99)
    assert signing.verify(r3, HOST, PATH, old, NOW + 22) == (False, "unknown_key")


def test_public_view_never_shows_a_secret(ring):
    rotated, _, _ = signing.rotate(ring, NOW, grace=60)
    view = signing.public_view(rotated, NOW)
    text = repr(view)
    assert all(rec["secret"] not in text for rec in rotated["keys"].values())
    assert view["current_kid"] == rotated["current"] and len(view["keys"]) == 2
