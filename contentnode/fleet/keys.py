"""The fleet's keys: the primary's Ed25519 signing key and its epochs, the
recovery key, the AES-GCM fleet key, and the files that hold them.

Secrets live in <data_dir>/fleet/ (folder 0700, files 0600), never in the
state document, so no backup, answer or log line can carry them:
signing.key (primary only), bucket.json (the bucket's access and secret key),
member.key and sealing.key (fleet/members.py), and fleet.key on a node that
joined a primary from before member lists.

Key epochs: each bundle carries the certificates of every signing key from
epoch 1 up to the one that signed it. Epoch 1 is signed by the recovery key
at init; epoch n+1 by the key of epoch n ("previous") or by the recovery key
("recovery", for a promotion when the old primary is gone). A promotion also
replaces the recovery key: its certificate names the next recovery public key
("recovery_public_key"), so a recovery secret serves one promotion only; no
"previous"-signed certificate may name one (a stolen signing key cannot
replace the recovery key). A replica pins (epoch, public key) and the
recovery public key when it joins and walks the chain up from there; nothing
else can introduce a key.
"""

import base64
import json
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contentnode.fileio import atomic_write, ensure_private_dir
from contentnode.fleet.wire import Refused, b64, canonical, unb64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

FOLDER = "fleet"
SIGNING_FILE, FLEET_KEY_FILE, BUCKET_FILE = "signing.key", "fleet.key", "bucket.json"
MEMBER_FILE, SEALING_FILE = "member.key", "sealing.key"   # fleet/members.py
RECOVERY_PREFIX = "cnr_"
FLEET_KEY_BYTES = 32
MAX_KEY_CERTS = 1000  # a chain longer than this is refused rather than walked


def public_text(key: "Ed25519PrivateKey") -> str:
    from cryptography.hazmat.primitives import serialization
    return b64(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def private_bytes(key: "Ed25519PrivateKey") -> bytes:
    from cryptography.hazmat.primitives import serialization
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def public_key(text, what: str) -> "Ed25519PublicKey":
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    return Ed25519PublicKey.from_public_bytes(unb64(text, what, 32))


def verify(public: str, signature, message: bytes, what: str) -> None:
    """Refused "bad_signature" unless `signature` (base64) is `public`'s over `message`."""
    from cryptography.exceptions import InvalidSignature
    try:
        public_key(public, what).verify(unb64(signature, f"{what} signature", 64), message)
    except InvalidSignature:
        raise Refused("bad_signature", f"the {what} signature does not verify") from None


def sign(key: "Ed25519PrivateKey", message: bytes) -> str:
    return b64(key.sign(message))


# ---------------------------------------------------------------- recovery key


def new_recovery() -> tuple[str, str]:
    """(recovery secret shown once, its public key kept by every node)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    text = RECOVERY_PREFIX + base64.urlsafe_b64encode(private_bytes(key)).decode("ascii").rstrip("=")
    return text, public_text(key)


def recovery_key(text: str) -> "Ed25519PrivateKey":
    """The key behind a recovery secret; Refused "bad_recovery_secret" when it is not one."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    if not isinstance(text, str) or not text.startswith(RECOVERY_PREFIX) or len(text) != len(RECOVERY_PREFIX) + 43:
        raise Refused("bad_recovery_secret", "this is not a recovery secret (cnr_ followed by 43 characters)")
    encoded = text[len(RECOVERY_PREFIX):]
    try:  # strict: the lenient decoder drops characters outside the alphabet and yields a short seed
        seed = base64.b64decode(encoded.encode("ascii") + b"=", altchars=b"-_", validate=True)
    except (ValueError, UnicodeEncodeError):
        seed = b""
    if len(seed) != 32 or base64.urlsafe_b64encode(seed).decode("ascii").rstrip("=") != encoded:
        raise Refused("bad_recovery_secret", "the recovery secret is damaged")
    return Ed25519PrivateKey.from_private_bytes(seed)


# ---------------------------------------------------------------- key certificates


def certify(fleet_id: str, epoch: int, public: str, issued_at: str, signer: "Ed25519PrivateKey",
            signer_kind: str, next_recovery: str | None = None) -> dict:
    """The certificate of one signing key; `signer_kind` "previous" or "recovery"; a
    "recovery" certificate of a promotion names the recovery key that replaces its signer."""
    cert = {"fleet_id": fleet_id, "epoch": epoch, "public_key": public, "issued_at": issued_at}
    if next_recovery is not None:
        cert["recovery_public_key"] = next_recovery
    return {"cert": cert, "signer": signer_kind, "signature": sign(signer, canonical(cert))}


@dataclass(frozen=True)
class Pin:
    """What a node trusts: a signing key at an epoch, and the recovery key."""

    epoch: int
    public_key: str
    recovery_public_key: str


def _cert(entry, fleet_id: str, index: int) -> dict:
    if not isinstance(entry, dict) or not isinstance(entry.get("cert"), dict):
        raise Refused("malformed", f"key certificate {index} is not an object")
    cert = entry["cert"]
    if set(cert) - {"recovery_public_key"} != {"fleet_id", "epoch", "public_key", "issued_at"} \
            or type(cert["epoch"]) is not int:
        raise Refused("malformed", f"key certificate {index} has the wrong fields")
    if cert["fleet_id"] != fleet_id:
        raise Refused("other_fleet", f"key certificate {index} belongs to another fleet")
    if cert["epoch"] != index + 1:
        raise Refused("malformed", "the key certificates are not epochs 1, 2, 3... in order")
    return cert


def signing_key_of(keys, fleet_id: str, pin: Pin) -> Pin:
    """The pin after walking `keys` (a bundle's certificates) up from `pin`; Refused when the
    chain does not lead there (a lower epoch than pinned, another key at the pinned epoch,
    a certificate not signed by the key before it or by the pinned recovery key)."""
    if not isinstance(keys, list) or not keys or len(keys) > MAX_KEY_CERTS:
        raise Refused("malformed", "the bundle carries no usable key certificates")
    certs = [_cert(entry, fleet_id, i) for i, entry in enumerate(keys)]
    if len(certs) < pin.epoch:
        raise Refused("wrong_key_epoch", f"the bundle is signed at key epoch {len(certs)}, "
                                         f"below the pinned epoch {pin.epoch}")
    if certs[pin.epoch - 1]["public_key"] != pin.public_key:
        raise Refused("wrong_key_epoch", f"the bundle's key for epoch {pin.epoch} is not the pinned one")
    current, recovery = pin.public_key, pin.recovery_public_key
    for entry, cert in zip(keys[pin.epoch:], certs[pin.epoch:]):
        signer = {"previous": current, "recovery": recovery}.get(entry.get("signer"))
        if signer is None:
            raise Refused("malformed", f"key epoch {cert['epoch']}: signer must be previous or recovery")
        if "recovery_public_key" in cert and entry["signer"] != "recovery":
            raise Refused("wrong_key_epoch", f"key epoch {cert['epoch']}: only the recovery key may name its successor")
        try:
            verify(signer, entry.get("signature"), canonical(cert), f"key epoch {cert['epoch']} certificate")
        except Refused as exc:
            raise Refused("wrong_key_epoch", exc.message) from None
        current = cert["public_key"]
        public_key(current, f"key epoch {cert['epoch']}")
        if "recovery_public_key" in cert:
            recovery = cert["recovery_public_key"]
            public_key(recovery, f"key epoch {cert['epoch']} recovery key")
    return Pin(len(certs), current, recovery)


def recovery_signed(keys, public: str) -> int | None:
    """The latest epoch whose certificate the recovery key `public` signed in a verified
    chain (init or a promotion), or None: a recovery key that signed one and is no longer
    the current one was replaced by a promotion."""
    found = None
    for entry in keys:
        if isinstance(entry, dict) and entry.get("signer") == "recovery":
            try:
                verify(public, entry.get("signature"), canonical(entry.get("cert")), "recovery")
            except Refused:
                continue
            found = entry["cert"]["epoch"]
    return found


# ---------------------------------------------------------------- files


@dataclass(frozen=True)
class Secrets:
    """A member's secrets: the fleet key (given at join by a primary before member lists, else
    None), bucket credentials, and (primary) the signing key."""

    fleet_key: bytes | None
    access_key: str
    secret_key: str
    signing: "Ed25519PrivateKey | None" = None

    def __repr__(self):
        return "Secrets(...)"


def folder(data_dir: str) -> str:
    return os.path.join(data_dir, FOLDER)


def save_signing(data_dir: str, key: "Ed25519PrivateKey", name: str = SIGNING_FILE) -> None:
    """Write a signing key (0600) under fleet/ as `name`."""
    ensure_private_dir(folder(data_dir))
    atomic_write(os.path.join(folder(data_dir), name), b64(private_bytes(key)).encode())


def save(data_dir: str, secrets_: Secrets) -> None:
    path = folder(data_dir)
    ensure_private_dir(path)
    if secrets_.fleet_key is not None:
        atomic_write(os.path.join(path, FLEET_KEY_FILE), b64(secrets_.fleet_key).encode())
    atomic_write(os.path.join(path, BUCKET_FILE), json.dumps(
        {"access_key": secrets_.access_key, "secret_key": secrets_.secret_key}).encode())
    if secrets_.signing is not None:
        save_signing(data_dir, secrets_.signing)
    else:
        remove_signing(data_dir)


def load(data_dir: str) -> Secrets | None:
    """The secrets on disk, or None when this node holds none (standalone: every start asks, and
    imports no cryptography for it)."""
    path = folder(data_dir)
    try:
        with open(os.path.join(path, BUCKET_FILE), "rb") as f:
            bucket = json.loads(f.read())
    except FileNotFoundError:
        return None
    fleet_key = None
    try:
        with open(os.path.join(path, FLEET_KEY_FILE), "rb") as f:
            fleet_key = unb64(f.read().decode("ascii").strip(), "fleet.key", FLEET_KEY_BYTES)
    except FileNotFoundError:
        pass
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    signing = None
    try:
        with open(os.path.join(path, SIGNING_FILE), "rb") as f:
            signing = Ed25519PrivateKey.from_private_bytes(unb64(f.read().decode("ascii").strip(), "signing.key", 32))
    except FileNotFoundError:
        pass
    return Secrets(fleet_key, bucket["access_key"], bucket["secret_key"], signing)


def remove(data_dir: str) -> None:
    path = folder(data_dir)
    for name in (SIGNING_FILE, FLEET_KEY_FILE, BUCKET_FILE, MEMBER_FILE, SEALING_FILE):
        try:
            os.unlink(os.path.join(path, name))
        except FileNotFoundError:
            pass


def new_fleet_key() -> bytes:
    return secrets.token_bytes(FLEET_KEY_BYTES)


def remove_signing(data_dir: str) -> None:
    try:
        os.unlink(os.path.join(folder(data_dir), SIGNING_FILE))
    except FileNotFoundError:
        pass
