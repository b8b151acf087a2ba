"""A software WebAuthn authenticator for the API tests: what a browser and a passkey would send.

It makes a P-256 (or Ed25519) key pair, answers creation options with "none"
attestation and request options with a signed assertion, in the JSON forms of
PublicKeyCredential.toJSON(). Its CBOR comes from cbor2, not from the node's
decoder, and every test that lets the node judge its output can also hand the
same output to py_webauthn, a verifier written by others (`independently_*`).
"""

import base64
import hashlib
import json
import os

import cbor2
import webauthn
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

UP, UV, BE, BS, AT = 0x01, 0x04, 0x08, 0x10, 0x40


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SoftAuthenticator:
    """One credential on one authenticator; `sign_count` grows by one per assertion."""

    def __init__(self, algorithm: str = "ES256", user_verified: bool = True, backup_eligible: bool = False):
        self.algorithm = algorithm
        self.key = ec.generate_private_key(ec.SECP256R1()) if algorithm == "ES256" else Ed25519PrivateKey.generate()
        self.credential_id = os.urandom(16)
        self.user_verified = user_verified
        self.backup_eligible = backup_eligible
        self.sign_count = 0
        self.user_handle = None

    def cose_key(self) -> bytes:
        public = self.key.public_key()
        if self.algorithm == "ES256":
            numbers = public.public_numbers()
            return cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                                -3: numbers.y.to_bytes(32, "big")})
        return cbor2.dumps({1: 1, 3: -8, -1: 6, -2: public.public_bytes(Encoding.Raw, PublicFormat.Raw)})

    def _flags(self, extra: int = 0) -> int:
        flags = UP | extra
        if self.user_verified:
            flags |= UV
        if self.backup_eligible:
            flags |= BE | BS
        return flags

    @staticmethod
    def _client_data(kind: str, challenge: str, origin: str) -> bytes:
        return json.dumps({"type": kind, "challenge": challenge, "origin": origin, "crossOrigin": False}).encode()

    def create(self, options: dict, origin: str, rp_id: str | None = None, fmt: str = "none") -> dict:
        """The PublicKeyCredential (toJSON) answering creation options."""
        rp_id = rp_id or options["rp"]["id"]
        self.user_handle = unb64url(options["user"]["id"])
        client_data = self._client_data("webauthn.create", options["challenge"], origin)
        auth_data = (hashlib.sha256(rp_id.encode()).digest() + bytes([self._flags(AT)])
                     + self.sign_count.to_bytes(4, "big") + bytes(16)
                     + len(self.credential_id).to_bytes(2, "big") + self.credential_id + self.cose_key())
        attestation = cbor2.dumps({"fmt": fmt, "attStmt": {}, "authData": auth_data})
        return {"id": b64url(self.credential_id), "rawId": b64url(self.credential_id), "type": "public-key",
                "authenticatorAttachment": "platform", "clientExtensionResults": {},
                "response": {"clientDataJSON": b64url(client_data), "attestationObject": b64url(attestation),
                             "transports": ["internal"]}}

    def get(self, options: dict, origin: str, rp_id: str | None = None, sign_count: int | None = None,
            user_present: bool = True, spoil_signature: bool = False) -> dict:
        """The PublicKeyCredential (toJSON) answering request options, signed."""
        rp_id = rp_id or options["rpId"]
        self.sign_count = self.sign_count + 1 if sign_count is None else sign_count
        flags = self._flags() if user_present else self._flags() & ~UP
        auth_data = hashlib.sha256(rp_id.encode()).digest() + bytes([flags]) + self.sign_count.to_bytes(4, "big")
        client_data = self._client_data("webauthn.get", options["challenge"], origin)
        signed = auth_data + hashlib.sha256(client_data).digest()
        if self.algorithm == "ES256":
            signature = self.key.sign(signed, ec.ECDSA(hashes.SHA256()))
        else:
            signature = self.key.sign(signed)
        if spoil_signature:
            signature = signature[:-1] + bytes([signature[-1] ^ 1])
        return {"id": b64url(self.credential_id), "rawId": b64url(self.credential_id), "type": "public-key",
                "authenticatorAttachment": "platform", "clientExtensionResults": {},
                "response": {"clientDataJSON": b64url(client_data), "authenticatorData": b64url(auth_data),
                             "signature": b64url(signature),
                             "userHandle": b64url(self.user_handle) if self.user_handle else None}}


def independently_registered(credential: dict, options: dict, origin: str) -> bytes:
    """py_webauthn's verdict on a registration: the COSE public key it accepted (raises when refused)."""
    verified = webauthn.verify_registration_response(
        credential=credential, expected_challenge=unb64url(options["challenge"]),
        expected_rp_id=options["rp"]["id"], expected_origin=origin)
    return verified.credential_public_key


def independently_authenticated(credential: dict, options: dict, origin: str, public_key: bytes,
                                sign_count: int, user_verification: bool) -> int:
    """py_webauthn's verdict on an assertion: the new sign count (raises when refused)."""
    verified = webauthn.verify_authentication_response(
        credential=credential, expected_challenge=unb64url(options["challenge"]), expected_rp_id=options["rpId"],
        expected_origin=origin, credential_public_key=public_key, credential_current_sign_count=sign_count,
        require_user_verification=user_verification)
    return verified.new_sign_count
