"""WebAuthn Level 3 relying-party checks: registration and assertion (no HTTP, no accounts).

The browser's PublicKeyCredential.toJSON() form comes in; what the node keeps of
a passkey comes out (its COSE public key, algorithm, sign counter and flags).
Signatures are verified with `cryptography`: ES256 (P-256), Ed25519 and RS256.

Attestation: the node asks for "none" and trusts a passkey because the signed-in
user, who just gave their password, registered it, never because of its maker.
So an attestation statement is not verified: fmt "none" (what Chromium and
Firefox send when "none" is asked for) and the registered formats are accepted
with the statement ignored; an unknown fmt is refused.
"""

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from contentnode.core import cbor
from contentnode.core.text import json_loads

ES256, EDDSA, RS256 = -7, -8, -257
ALGORITHMS = (EDDSA, ES256, RS256)  # what the node offers, most preferred first
ATTESTATION_FORMATS = {"none", "packed", "tpm", "android-key", "android-safetynet", "fido-u2f", "apple"}
MAX_CREDENTIAL_ID = 1023  # bytes, WebAuthn's own limit
FLAG_UP, FLAG_UV, FLAG_BE, FLAG_BS, FLAG_AT, FLAG_ED = 0x01, 0x04, 0x08, 0x10, 0x40, 0x80
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


class WebAuthnError(ValueError):
    """A credential that does not pass; the message says which check failed."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(value, what: str) -> bytes:
    """Strict unpadded base64url, as the JSON forms carry every binary member."""
    if not isinstance(value, str) or not _B64URL.fullmatch(value) or len(value) % 4 == 1:
        raise WebAuthnError(f"{what} must be unpadded base64url")
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise WebAuthnError(f"{what} must be unpadded base64url") from None


@dataclass(frozen=True)
class Expected:
    """What this ceremony must show: its challenge, relying party id and origin, and whether
    user verification (a PIN or biometric on the authenticator) is required."""

    challenge: str
    rp_id: str
    origin: str
    user_verification: bool


@dataclass(frozen=True)
class AuthData:
    rp_id_hash: bytes
    flags: int
    sign_count: int
    credential_id: bytes | None = None
    public_key: bytes | None = None  # the COSE key, as its CBOR bytes
    aaguid: bytes | None = None

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)


@dataclass(frozen=True)
class NewPasskey:
    """What a registration leaves: everything the node stores of the credential."""

    credential_id: bytes
    public_key: bytes
    algorithm: int
    sign_count: int
    backup_eligible: bool
    backup_state: bool
    user_verified: bool
    aaguid: str


# --------------------------------------------------------------- parsing


def parse_auth_data(data: bytes) -> AuthData:
    """authenticatorData: rpIdHash, flags, counter, then attested credential data and extensions."""
    if len(data) < 37:
        raise WebAuthnError("authenticatorData is shorter than 37 bytes")
    flags = data[32]
    pos = 37
    credential_id = public_key = aaguid = None
    if flags & FLAG_AT:
        if len(data) < pos + 18:
            raise WebAuthnError("authenticatorData ends inside the attested credential data")
        aaguid = data[pos:pos + 16]
        length = int.from_bytes(data[pos + 16:pos + 18], "big")
        pos += 18
        if not 1 <= length <= MAX_CREDENTIAL_ID or len(data) < pos + length:
            raise WebAuthnError("authenticatorData has a bad credential id length")
        credential_id = data[pos:pos + length]
        pos += length
        try:
            _, used = cbor.decode_prefix(data[pos:])
        except cbor.CborError as exc:
            raise WebAuthnError(f"the credential public key is not valid CBOR: {exc}") from None
        public_key = data[pos:pos + used]
        pos += used
    if flags & FLAG_ED:
        try:
            extensions, used = cbor.decode_prefix(data[pos:])
        except cbor.CborError as exc:
            raise WebAuthnError(f"authenticator extensions are not valid CBOR: {exc}") from None
        if not isinstance(extensions, dict):
            raise WebAuthnError("authenticator extensions must be a CBOR map")
        pos += used
    if pos != len(data):
        raise WebAuthnError("authenticatorData has trailing bytes")
    return AuthData(data[:32], flags, int.from_bytes(data[33:37], "big"), credential_id, public_key, aaguid)


def _public_key(cose_bytes: bytes):
    """(COSE algorithm, cryptography public key) of a COSE_Key; WebAuthnError when unsupported."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        key = cbor.decode(cose_bytes)
    except cbor.CborError as exc:
        raise WebAuthnError(f"the credential public key is not valid CBOR: {exc}") from None
    if not isinstance(key, dict):
        raise WebAuthnError("the credential public key is not a COSE key")
    kty, alg = key.get(1), key.get(3)
    try:
        if kty == 2 and alg == ES256 and key.get(-1) == 1:
            x, y = key.get(-2), key.get(-3)
            if not (isinstance(x, bytes) and isinstance(y, bytes) and len(x) == len(y) == 32):
                raise WebAuthnError("an ES256 key needs 32-byte x and y")
            return alg, ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b"\x04" + x + y)
        if kty == 1 and alg == EDDSA and key.get(-1) == 6:
            x = key.get(-2)
            if not (isinstance(x, bytes) and len(x) == 32):
                raise WebAuthnError("an Ed25519 key needs a 32-byte x")
            return alg, Ed25519PublicKey.from_public_bytes(x)
        if kty == 3 and alg == RS256:
            n, e = key.get(-1), key.get(-2)
            if not (isinstance(n, bytes) and isinstance(e, bytes) and 256 <= len(n) <= 512 and 1 <= len(e) <= 8):
                raise WebAuthnError("an RS256 key needs a 2048- to 4096-bit modulus")
            numbers = rsa.RSAPublicNumbers(int.from_bytes(e, "big"), int.from_bytes(n, "big"))
            return alg, numbers.public_key()
    except WebAuthnError:
        raise
    except ValueError as exc:
        raise WebAuthnError(f"the credential public key is not a valid key: {exc}") from None
    raise WebAuthnError("the credential's algorithm is not one the node accepts (ES256, Ed25519, RS256)")


def algorithm_of(cose_bytes: bytes) -> int:
    return _public_key(cose_bytes)[0]


def _verify_signature(cose_bytes: bytes, signature: bytes, signed: bytes) -> None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    alg, key = _public_key(cose_bytes)
    try:
        if alg == ES256:
            key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
        elif alg == EDDSA:
            key.verify(signature, signed)
        else:
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError):
        raise WebAuthnError("the signature does not verify") from None


# --------------------------------------------------------------- shared checks


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise WebAuthnError(f"{what} must be a JSON object")
    return value


def credential_id(credential) -> bytes:
    """The raw credential id of a JSON credential (id and rawId must agree)."""
    credential = _object(credential, "credential")
    if credential.get("type") != "public-key":
        raise WebAuthnError('credential.type must be "public-key"')
    raw = from_b64url(credential.get("rawId"), "credential.rawId")
    if credential.get("id") != credential.get("rawId") or not 1 <= len(raw) <= MAX_CREDENTIAL_ID:
        raise WebAuthnError("credential.id must equal credential.rawId (1 to 1023 bytes)")
    return raw


def client_data(response: dict) -> tuple[bytes, dict]:
    """(the raw clientDataJSON, parsed)."""
    raw = from_b64url(response.get("clientDataJSON"), "response.clientDataJSON")
    try:
        parsed = json_loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise WebAuthnError("clientDataJSON is not JSON") from None
    return raw, _object(parsed, "clientDataJSON")


def challenge_of(credential) -> str:
    """The challenge a credential answers (read before its ceremony is looked up)."""
    response = _object(_object(credential, "credential").get("response"), "credential.response")
    challenge = client_data(response)[1].get("challenge")
    if not isinstance(challenge, str) or not challenge:
        raise WebAuthnError("clientDataJSON has no challenge")
    return challenge


def same_origin(origin, expected: str) -> bool:
    """Scheme, host and port equal; a default port may be written or left out."""
    def parts(value: str):
        scheme, sep, rest = value.partition("://")
        if not sep or "/" in rest:
            return None
        host, port = rest, {"http": "80", "https": "443"}.get(scheme.lower())
        if rest.rsplit(":", 1)[-1].isdigit() and not rest.endswith("]"):
            host, port = rest.rsplit(":", 1)
        return scheme.lower(), host.lower(), port

    return isinstance(origin, str) and parts(origin) is not None and parts(origin) == parts(expected)


def _check_client_data(data: dict, kind: str, expected: Expected) -> None:
    if data.get("type") != kind:
        raise WebAuthnError(f'clientDataJSON.type must be "{kind}"')
    if data.get("challenge") != expected.challenge:
        raise WebAuthnError("clientDataJSON.challenge is not this ceremony's challenge")
    if not same_origin(data.get("origin"), expected.origin):
        raise WebAuthnError(f"clientDataJSON.origin must be {expected.origin}")
    if data.get("crossOrigin") is True or "topOrigin" in data:
        raise WebAuthnError("a passkey ceremony from inside another site's frame is refused")


def _check_auth_data(auth: AuthData, expected: Expected) -> None:
    if auth.rp_id_hash != hashlib.sha256(expected.rp_id.encode()).digest():
        raise WebAuthnError(f"the authenticator data is for another relying party id than {expected.rp_id}")
    if not auth.has(FLAG_UP):
        raise WebAuthnError("the authenticator did not report user presence")
    if expected.user_verification and not auth.has(FLAG_UV):
        raise WebAuthnError("the authenticator did not verify the user (a PIN or biometric is required)")
    if auth.has(FLAG_BS) and not auth.has(FLAG_BE):
        raise WebAuthnError("the authenticator reports a backed-up credential that is not backup-eligible")


# --------------------------------------------------------------- ceremonies


def verify_registration(credential, expected: Expected) -> NewPasskey:
    """Check a PublicKeyCredential (create) JSON against its ceremony; what to store."""
    raw_id = credential_id(credential)
    response = _object(credential.get("response"), "credential.response")
    _, data = client_data(response)
    _check_client_data(data, "webauthn.create", expected)
    try:
        attestation = cbor.decode(from_b64url(response.get("attestationObject"), "response.attestationObject"))
    except cbor.CborError as exc:
        raise WebAuthnError(f"attestationObject is not valid CBOR: {exc}") from None
    if not (isinstance(attestation, dict) and isinstance(attestation.get("authData"), bytes)
            and isinstance(attestation.get("attStmt"), dict) and isinstance(attestation.get("fmt"), str)):
        raise WebAuthnError("attestationObject must hold fmt, attStmt and authData")
    if attestation["fmt"] not in ATTESTATION_FORMATS:
        raise WebAuthnError(f"unknown attestation format {attestation['fmt'][:40]!r}")
    if attestation["fmt"] == "none" and attestation["attStmt"]:
        raise WebAuthnError('attestation format "none" must carry an empty statement')
    auth = parse_auth_data(attestation["authData"])
    _check_auth_data(auth, expected)
    if auth.credential_id is None or auth.public_key is None or auth.aaguid is None:
        raise WebAuthnError("the authenticator data carries no credential")
    if auth.credential_id != raw_id:
        raise WebAuthnError("credential.rawId is not the id in the authenticator data")
    return NewPasskey(raw_id, auth.public_key, algorithm_of(auth.public_key), auth.sign_count,
                      auth.has(FLAG_BE), auth.has(FLAG_BS), auth.has(FLAG_UV), auth.aaguid.hex())


@dataclass(frozen=True)
class Assertion:
    """A verified assertion: the new counter and flags to store."""

    sign_count: int
    backup_state: bool
    user_verified: bool


class CounterWentBack(WebAuthnError):
    """The sign counter did not grow: two authenticators may hold this credential (a clone)."""


def user_handle(credential) -> bytes | None:
    """The user handle a discoverable credential returns (None when absent)."""
    response = _object(_object(credential, "credential").get("response"), "credential.response")
    value = response.get("userHandle")
    return None if value in (None, "") else from_b64url(value, "response.userHandle")


def verify_assertion(credential, expected: Expected, public_key: bytes, sign_count: int,
                     backup_eligible: bool) -> Assertion:
    """Check a PublicKeyCredential (get) JSON signed by the stored `public_key`."""
    credential_id(credential)
    response = _object(credential.get("response"), "credential.response")
    raw_client_data, data = client_data(response)
    _check_client_data(data, "webauthn.get", expected)
    auth_bytes = from_b64url(response.get("authenticatorData"), "response.authenticatorData")
    auth = parse_auth_data(auth_bytes)
    if auth.has(FLAG_AT):
        raise WebAuthnError("an assertion carries no attested credential data")
    _check_auth_data(auth, expected)
    if auth.has(FLAG_BE) != backup_eligible:
        raise WebAuthnError("the credential's backup eligibility changed since it was registered")
    signature = from_b64url(response.get("signature"), "response.signature")
    _verify_signature(public_key, signature, auth_bytes + hashlib.sha256(raw_client_data).digest())
    if (auth.sign_count or sign_count) and auth.sign_count <= sign_count:
        raise CounterWentBack(f"the sign counter did not grow ({auth.sign_count} after {sign_count})")
    return Assertion(auth.sign_count, auth.has(FLAG_BS), auth.has(FLAG_UV))
