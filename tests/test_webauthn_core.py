"""core/cbor.py and core/webauthn.py on their own: the strict decoder, fuzzed, and the ceremony checks."""

import hashlib

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contentnode.core import cbor, webauthn
from tests.soft_authenticator import SoftAuthenticator, b64url

ORIGIN = "https://panel.example:8443"
RP_ID = "panel.example"

# what WebAuthn's CBOR holds: integers, byte and text strings, lists, maps with int or text keys, booleans, null
_leaves = st.one_of(st.integers(min_value=-(2 ** 64), max_value=2 ** 64 - 1), st.binary(max_size=64),
                    st.text(max_size=32), st.booleans(), st.none())
_values = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=6),
    st.dictionaries(st.one_of(st.integers(min_value=-1000, max_value=1000), st.text(max_size=8)), inner,
                    max_size=6)), max_leaves=30)


@given(_values)
@settings(max_examples=300, deadline=None)
def test_decodes_what_an_independent_encoder_wrote(value):
    encoded = cbor2.dumps(value)
    assert cbor.decode(encoded) == value
    assert cbor.decode_prefix(encoded + b"\x00") == (value, len(encoded))


@pytest.mark.parametrize("parse, error", [(cbor.decode, cbor.CborError),
                                          (webauthn.parse_auth_data, webauthn.WebAuthnError)])
@given(data=st.binary(max_size=300))
@settings(max_examples=800, deadline=None)
def test_arbitrary_bytes_parse_or_raise_their_own_error_only(parse, error, data):
    """CBOR and authenticatorData from an attacker: never an exception other than the parser's own."""
    try:
        parse(data)
    except error:
        pass


@pytest.mark.parametrize("data, reason", [
    (cbor2.dumps(1.5), "floats"),
    (cbor2.dumps(cbor2.CBORTag(24, b"x")), "tags"),
    (b"\x9f\x01\xff", "indefinite"),
    (b"\xa2\x01\x01\x01\x02", "duplicate"),
    (b"\xa1\x41x\x01", "keys"),
    (b"\x62\xc3\x28", "UTF-8"),
    (b"\x5a\xff\xff\xff\xff", "ends too early"),
    (b"\x9b" + b"\xff" * 8, "longer than the data"),
    (b"\x81" * 20 + b"\x01", "deeply"),
    (cbor2.dumps(1) + b"\x00", "trailing"),
])
def test_refuses_what_webauthn_never_sends(data, reason):
    with pytest.raises(cbor.CborError, match=reason):
        cbor.decode(data)


def _options():
    return {"rp": {"id": RP_ID}, "user": {"id": b64url(b"user-1")}, "challenge": b64url(b"c" * 32),
            "rpId": RP_ID}


def _expected(uv=False):
    return webauthn.Expected(b64url(b"c" * 32), RP_ID, ORIGIN, uv)


@pytest.mark.parametrize("algorithm", ["ES256", "Ed25519"])
def test_registration_and_assertion(algorithm):
    device = SoftAuthenticator(algorithm=algorithm)
    new = webauthn.verify_registration(device.create(_options(), ORIGIN), _expected())
    assert new.credential_id == device.credential_id and new.algorithm == (-7 if algorithm == "ES256" else -8)
    used = webauthn.verify_assertion(device.get(_options(), ORIGIN), _expected(True), new.public_key, 0, False)
    assert used.sign_count == 1 and used.user_verified
    with pytest.raises(webauthn.CounterWentBack):
        webauthn.verify_assertion(device.get(_options(), ORIGIN, sign_count=1), _expected(), new.public_key, 1, False)


def test_origin_must_match_scheme_host_and_port():
    assert webauthn.same_origin("https://panel.example:8443", ORIGIN)
    assert webauthn.same_origin("https://PANEL.example:8443", ORIGIN)
    assert webauthn.same_origin("https://panel.example", "https://panel.example:443")
    for other in ("http://panel.example:8443", "https://panel.example:8444", "https://evil.example:8443",
                  "https://panel.example:8443/x", "panel.example:8443", None):
        assert not webauthn.same_origin(other, ORIGIN)


def test_attestation_formats():
    """fmt "none" with an empty statement, or a registered fmt (its statement not verified); nothing else."""
    device = SoftAuthenticator()
    assert webauthn.verify_registration(device.create(_options(), ORIGIN, fmt="packed"), _expected())
    with pytest.raises(webauthn.WebAuthnError, match="unknown attestation format"):
        webauthn.verify_registration(device.create(_options(), ORIGIN, fmt="made-up"), _expected())


def test_a_changed_backup_eligibility_or_attested_data_in_an_assertion_is_refused():
    device = SoftAuthenticator(backup_eligible=True)
    new = webauthn.verify_registration(device.create(_options(), ORIGIN), _expected())
    assert new.backup_eligible and new.backup_state
    with pytest.raises(webauthn.WebAuthnError, match="backup eligibility"):
        webauthn.verify_assertion(device.get(_options(), ORIGIN), _expected(), new.public_key, 0, False)


def test_auth_data_bounds():
    head = hashlib.sha256(RP_ID.encode()).digest() + b"\x41" + bytes(4)  # UP and AT
    with pytest.raises(webauthn.WebAuthnError, match="shorter"):
        webauthn.parse_auth_data(head[:36])
    with pytest.raises(webauthn.WebAuthnError, match="credential id length"):
        webauthn.parse_auth_data(head + bytes(16) + (2000).to_bytes(2, "big") + bytes(10))
    with pytest.raises(webauthn.WebAuthnError, match="trailing"):
        webauthn.parse_auth_data(head[:32] + b"\x01" + bytes(4) + b"\x00")


@pytest.mark.parametrize("value", ["a=", "a+b", "a", 5, None])
def test_base64url_is_strict(value):
    with pytest.raises(webauthn.WebAuthnError):
        webauthn.from_b64url(value, "x")


def test_a_crafted_item_count_is_refused_before_any_work():
    many = b"\x99\x08\x00" + b"\x00" * 2048  # a list of 2048 zeros: more items than the decoder takes
    with pytest.raises(cbor.CborError, match="too many"):
        cbor.decode(many)
