"""The signed bundle: build it on the primary, verify and open it on a replica.

    {"format": "contentnode-fleet-bundle", "version": 1, "fleet_id", "seq",
     "issued_at", "expires_at", "primary": node_id, "keys": [key certificates],
     "parts": {name: {"sha256", "data"} | {"sha256", "sealed"}}, "signature"}

The signature is Ed25519 over the canonical bytes of everything but
"signature". A plain part's sha256 is over the canonical bytes of its data;
a sealed part is AES-GCM under the fleet key (12-byte nonce first) with
"contentnode-fleet/<fleet_id>/<seq>/<part>" as associated data, so a sealed
part cannot be moved to another part, seq or fleet, and its sha256 is over
the sealed bytes (a hash of a secret is never published).
"""

import hashlib
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.fleet import keys
from contentnode.fleet.wire import Refused, b64, canonical, loads, unb64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

FORMAT, VERSION = "contentnode-fleet-bundle", 1
MAX_BYTES = 16 << 20   # a bundle of 10,000 rules is about 3 MB
NONCE_BYTES = 12
MEMBERS = "members"   # the plain part naming the members (fleet/members.py); absent from older primaries
_FIELDS = {"format", "version", "fleet_id", "seq", "issued_at", "expires_at", "primary", "keys", "parts",
           "signature"}


def _aad(fleet_id: str, seq: int, name: str) -> bytes:
    return f"contentnode-fleet/{fleet_id}/{seq}/{name}".encode()


def seal(fleet_key: bytes, fleet_id: str, seq: int, name: str, value) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(fleet_key).encrypt(nonce, canonical(value), _aad(fleet_id, seq, name))


def unseal(fleet_key: bytes, fleet_id: str, seq: int, name: str, sealed: bytes):
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    try:
        plain = AESGCM(fleet_key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _aad(fleet_id, seq, name))
    except (InvalidTag, ValueError):
        raise Refused("sealed_part", f"part {name} does not open under the fleet key") from None
    return loads(plain)


def build(*, fleet_id: str, seq: int, issued_at: float, lifetime: int, primary: str, key_certs: list,
          signing: "Ed25519PrivateKey", fleet_key: bytes, parts: dict, sealed: frozenset) -> bytes:
    """The bundle's bytes; `parts` {name: JSON value}, the names in `sealed` encrypted."""
    out = {}
    for name, value in parts.items():
        if name in sealed:
            blob = seal(fleet_key, fleet_id, seq, name, value)
            out[name] = {"sha256": hashlib.sha256(blob).hexdigest(), "sealed": b64(blob)}
        else:
            out[name] = {"sha256": hashlib.sha256(canonical(value)).hexdigest(), "data": value}
    doc = {"format": FORMAT, "version": VERSION, "fleet_id": fleet_id, "seq": seq,
           "issued_at": rfc3339(issued_at), "expires_at": rfc3339(issued_at + lifetime), "primary": primary,
           "keys": key_certs, "parts": out}
    doc["signature"] = keys.sign(signing, canonical(doc))
    return canonical(doc)


@dataclass(frozen=True)
class Opened:
    """A verified bundle: its seq, times, primary, the pin after its key chain, its parts."""

    seq: int
    issued_at: float
    expires_at: float
    primary: str
    pin: keys.Pin
    parts: dict


# The bundle is canonical JSON (sorted keys), so its head and tail sit at known places: the key
# chain and the signature are read and checked on the raw bytes before the whole object is parsed.
_HEAD = re.compile(rb'\{"expires_at":"[^"\\]{1,64}","fleet_id":"([^"\\]{1,128})","format":"' + FORMAT.encode()
                   + rb'","issued_at":"[^"\\]{1,64}","keys":')
_TAIL = re.compile(rb',"primary":"[^"\\]{1,128}","seq":[0-9]{1,18}(,"signature":"([A-Za-z0-9+/=]{1,128})")'
                   rb',"version":[0-9]{1,6}\}\Z')
_PARTS = b'],"parts":{'
KEYS_MAX_BYTES = 1 << 20   # MAX_KEY_CERTS certificates of a few hundred bytes each


def _head_of(fleet_id: str):
    """A check of the first bytes of bundle.json (the S3 read stops at once when it fails)."""
    def check(first: bytes) -> None:
        head = _HEAD.match(first)
        if head is None:
            raise Refused("malformed", "bundle.json is not a contentnode fleet bundle")
        if head.group(1).decode("ascii") != fleet_id:
            raise Refused("other_fleet", "the bundle belongs to another fleet")
    return check


def fetch(client, key: str, fleet_id: str, if_none_match: str | None = None):
    """bundle.json's bytes (S3Client.get_bytes' Fetched, or None when there is none), read only
    while its first bytes look like a bundle of this fleet and at most MAX_BYTES."""
    return client.get_bytes(key, if_none_match=if_none_match, max_bytes=MAX_BYTES, head_check=_head_of(fleet_id))


def _signed_by_pin(raw: bytes, fleet_id: str, pin: keys.Pin) -> None:
    """Refused unless the raw bytes carry a key chain from `pin` and a signature by its last key
    over the rest: a bucket writer without the keys cannot make a node parse megabytes of JSON."""
    head, tail = _HEAD.match(raw), _TAIL.search(raw, max(0, len(raw) - 512))
    end = raw.find(_PARTS, head.end(), head.end() + KEYS_MAX_BYTES) if head else -1
    _head_of(fleet_id)(raw[:4096])
    if head is None or tail is None or end < 0:
        raise Refused("malformed", "bundle.json is not a contentnode fleet bundle")
    try:
        chain = loads(raw[head.end():end + 1])
    except ValueError:
        raise Refused("malformed", "the bundle's key certificates are not JSON") from None
    signer = keys.signing_key_of(chain, fleet_id, pin)
    keys.verify(signer.public_key, tail.group(2).decode("ascii"),
                raw[:tail.start(1)] + raw[tail.end(1):], "bundle")


def parse(raw: bytes, fleet_id: str, pin: keys.Pin) -> dict:
    """The bundle's JSON object, parsed only once its key chain from `pin` and its signature
    verify on the raw bytes; Refused "malformed" for anything else (a truncated object, NaN or
    Infinity, nesting too deep: what canonical() could not write again to verify)."""
    if len(raw) > MAX_BYTES:
        raise Refused("malformed", f"the bundle is larger than {MAX_BYTES} bytes")
    _signed_by_pin(raw, fleet_id, pin)
    try:
        doc = loads(raw)
    except ValueError as exc:
        raise Refused("malformed", f"bundle.json is not complete, strict JSON (half-written or damaged: {exc})") \
            from None
    if not isinstance(doc, dict) or set(doc) != _FIELDS or doc.get("format") != FORMAT:
        raise Refused("malformed", "bundle.json is not a contentnode fleet bundle")
    if doc["version"] != VERSION:
        raise Refused("malformed", f"bundle version {doc['version']!r} is not one this node reads ({VERSION})")
    if type(doc["seq"]) is not int or doc["seq"] < 1 or not isinstance(doc["parts"], dict):
        raise Refused("malformed", "the bundle's seq or parts are malformed")
    return doc


def key_epoch(doc: dict) -> int:
    """How many key certificates a parsed bundle carries (its signing key's epoch)."""
    return len(doc["keys"]) if isinstance(doc.get("keys"), list) else 0


def verify(doc: dict, fleet_id: str, pin: keys.Pin) -> keys.Pin:
    """Check fleet, key chain and signature of a parsed bundle; the pin it was signed under."""
    if doc["fleet_id"] != fleet_id:
        raise Refused("other_fleet", "the bundle belongs to another fleet")
    signer = keys.signing_key_of(doc["keys"], fleet_id, pin)
    unsigned = {k: v for k, v in doc.items() if k != "signature"}
    try:
        signed = canonical(unsigned)
    except (ValueError, RecursionError):  # parse() refuses these; a doc made elsewhere may not
        raise Refused("malformed", "the bundle holds values that are not strict JSON") from None
    keys.verify(signer.public_key, doc["signature"], signed, "bundle")
    return signer


def _time(doc: dict, name: str) -> float:
    try:
        return parse_rfc3339(doc[name])
    except (TypeError, ValueError, AttributeError):
        raise Refused("malformed", f"the bundle's {name} is not a time") from None


def open_bundle(doc: dict, *, fleet_id: str, pin: keys.Pin, fleet_key, applied_seq: int, now: float,
                names: frozenset, sealed: frozenset) -> Opened | None:
    """Verify a parsed bundle for applying; None when its seq is the one applied (nothing to do).

    `fleet_key`: the key of the sealed parts, or a function of the (verified) "members" part
    giving it (fleet/members.py; None for a bundle without one, from a primary before member
    lists). Refused: other fleet, key chain or signature, lower seq (replayed or older),
    expired, a part missing, unknown, altered or not opening under the key.
    """
    signer = verify(doc, fleet_id, pin)
    seq = doc["seq"]
    if seq == applied_seq:
        return None
    if seq < applied_seq:
        raise Refused("older_seq", f"the bundle's seq {seq} is below the applied seq {applied_seq} "
                                   "(an older or replayed bundle)")
    issued_at, expires_at = _time(doc, "issued_at"), _time(doc, "expires_at")
    if expires_at <= now:
        raise Refused("expired", f"the bundle expired at {doc['expires_at']}")
    if set(doc["parts"]) - {MEMBERS} != names:
        raise Refused("malformed", "the bundle's parts are not the ones this version shares")
    parts: dict = {}
    for name, part in sorted(doc["parts"].items(), key=lambda item: item[0] != MEMBERS):  # members first
        if name in sealed and callable(fleet_key):
            fleet_key = fleet_key(parts.get(MEMBERS))
        if not isinstance(part, dict) or set(part) != {"sha256", ("sealed" if name in sealed else "data")}:
            raise Refused("malformed", f"part {name} is malformed")
        if name in sealed:
            blob = unb64(part["sealed"], f"part {name}")
            if hashlib.sha256(blob).hexdigest() != part["sha256"]:
                raise Refused("part_hash", f"part {name} does not match its sha256")
            # no key: a joiner the primary has not added yet only counts the plain parts
            parts[name] = None if fleet_key is None else unseal(fleet_key, fleet_id, seq, name, blob)
        else:
            if hashlib.sha256(canonical(part["data"])).hexdigest() != part["sha256"]:
                raise Refused("part_hash", f"part {name} does not match its sha256")
            parts[name] = part["data"]
    if not isinstance(doc["primary"], str):
        raise Refused("malformed", "the bundle names no primary")
    return Opened(seq, issued_at, expires_at, doc["primary"], signer, parts)
