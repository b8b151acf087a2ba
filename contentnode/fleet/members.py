"""Fleet members: each node's own key pair, the member list the bundle carries, and the
sealing key wrapped for each member only (docs/API.md, Fleet).

Every node makes its member keys when it inits or joins: Ed25519 to sign what it
writes to the bucket (its status, its issuer leases) and X25519 to receive the
sealing key. They live in <data_dir>/fleet/member.key (0600), like the node's
other fleet secrets; only the public halves leave it (in the join claim, then in
the bundle).

The bundle's plain part "members" is {"sealing_id", "members": {node_id:
{"sign", "wrap", "wrapped"}}}: the sealed parts are AES-GCM under a random
sealing key that the primary replaces on every removal, leave, rotate-key and
promotion; "wrapped" is that key for one member (an ephemeral X25519 key,
HKDF-SHA256 of the shared secret bound to fleet, sealing id and node id, then
AES-GCM). A node not in the list cannot open any part sealed under the new key.

A fleet whose primary predates member lists seals under the fleet key every
node received at join (sealing id LEGACY once such a primary is upgraded,
until its first rotation): see the upgrade notes in docs/API.md.
"""

import json
import os
import secrets
from typing import TYPE_CHECKING

from contentnode.fileio import atomic_write, ensure_private_dir
from contentnode.fleet import keys, wire
from contentnode.fleet.wire import Refused, b64, canonical, unb64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

MEMBER_FILE, SEALING_FILE = keys.MEMBER_FILE, keys.SEALING_FILE
PART = "members"
LEGACY = "fleet-key"        # the sealing id of an upgraded fleet still sealing under its fleet key
MAX_MEMBERS = 1000
SIGNATURE = "signature"
NOT_A_MEMBER, PENDING = "not_a_member", "member_pending"


def _raw_public(key) -> bytes:
    """The 32 raw bytes of an X25519 key's public half."""
    from cryptography.hazmat.primitives import serialization
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class MemberKeys:
    """This node's own pair of keys; the private halves never leave the data dir."""

    def __init__(self, sign: "Ed25519PrivateKey", wrap: "X25519PrivateKey"):
        self.sign, self.wrap = sign, wrap

    def public(self) -> dict:
        return {"sign": keys.public_text(self.sign), "wrap": b64(_raw_public(self.wrap))}

    def __repr__(self):
        return "MemberKeys(...)"


def _path(data_dir: str, name: str) -> str:
    return os.path.join(keys.folder(data_dir), name)


def load(data_dir: str) -> MemberKeys | None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    try:
        with open(_path(data_dir, MEMBER_FILE), "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    wrap = X25519PrivateKey.from_private_bytes(unb64(doc["wrap"], "member.key", 32))
    return MemberKeys(Ed25519PrivateKey.from_private_bytes(unb64(doc["sign"], "member.key", 32)), wrap)


def new() -> MemberKeys:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    return MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())


def make(data_dir: str, made: MemberKeys | None = None) -> MemberKeys:
    """New member keys (or `made`), written (0600) before anything names them."""
    from cryptography.hazmat.primitives import serialization
    made = made or new()
    wrap = made.wrap.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                   serialization.NoEncryption())
    ensure_private_dir(keys.folder(data_dir))
    atomic_write(_path(data_dir, MEMBER_FILE), json.dumps(
        {"sign": b64(keys.private_bytes(made.sign)), "wrap": b64(wrap)}).encode())
    return made


def ensure(data_dir: str) -> MemberKeys:
    return load(data_dir) or make(data_dir)


# ---------------------------------------------------------------- the primary's sealing key


def load_sealing(data_dir: str) -> tuple[str, bytes] | None:
    """(sealing id, sealing key) the primary seals with, or None before its first."""
    try:
        with open(_path(data_dir, SEALING_FILE), "rb") as f:
            doc = json.loads(f.read())
    except FileNotFoundError:
        return None
    return doc["id"], unb64(doc["key"], "sealing.key", 32)


def new_sealing(data_dir: str, key: bytes, sealing_id: str | None = None) -> str:
    """Replace the sealing key with `key` (written before any bundle is sealed under it); its id."""
    sealing_id = sealing_id or secrets.token_hex(8)
    ensure_private_dir(keys.folder(data_dir))
    atomic_write(_path(data_dir, SEALING_FILE), json.dumps({"id": sealing_id, "key": b64(key)}).encode())
    return sealing_id


# ---------------------------------------------------------------- wrapping


def _kek(shared_secret: bytes, fleet_id: str, sealing_id: str, node_id: str) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    info = f"contentnode-fleet-wrap/{fleet_id}/{sealing_id}/{node_id}".encode()
    return HKDF(hashes.SHA256(), 32, salt=None, info=info).derive(shared_secret)


def wrap(sealing_key: bytes, fleet_id: str, sealing_id: str, node_id: str, wrap_public: str) -> str:
    """The sealing key for one member: ephemeral public key (32) + nonce (12) + AES-GCM."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    ephemeral = X25519PrivateKey.generate()
    shared_secret = ephemeral.exchange(X25519PublicKey.from_public_bytes(unb64(wrap_public, "wrap key", 32)))
    nonce = os.urandom(12)
    box = AESGCM(_kek(shared_secret, fleet_id, sealing_id, node_id)).encrypt(nonce, sealing_key, node_id.encode())
    return b64(_raw_public(ephemeral) + nonce + box)


def unwrap(member: MemberKeys, fleet_id: str, sealing_id: str, node_id: str, wrapped) -> bytes:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    blob = unb64(wrapped, "wrapped sealing key")
    if len(blob) != 32 + 12 + 32 + 16:
        raise Refused("malformed", "the wrapped sealing key has the wrong length")
    shared_secret = member.wrap.exchange(X25519PublicKey.from_public_bytes(blob[:32]))
    try:
        return AESGCM(_kek(shared_secret, fleet_id, sealing_id, node_id)).decrypt(blob[32:44], blob[44:],
                                                                                  node_id.encode())
    except InvalidTag:
        raise Refused(NOT_A_MEMBER, "the sealing key in the bundle is not wrapped for this node's keys") from None


def part(fleet_id: str, sealing_id: str, sealing_key: bytes, listed: dict, extra: dict) -> dict:
    """The bundle's "members" part for `listed` {node_id: {"sign", "wrap", ...}}; `extra` adds
    plain members (the join codes' state, fleet/joinclaims.py)."""
    members = {node_id: {"sign": row["sign"], "wrap": row["wrap"],
                         "wrapped": wrap(sealing_key, fleet_id, sealing_id, node_id, row["wrap"])}
               for node_id, row in sorted(listed.items())}
    return {**extra, "sealing_id": sealing_id, "members": members}


def public_of(value) -> dict | None:
    """{"sign", "wrap"} when `value` is a pair of public keys of the right shape, else None."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    if not isinstance(value, dict) or set(value) != {"sign", "wrap"}:
        return None
    try:
        keys.public_key(value["sign"], "member sign key")
        X25519PublicKey.from_public_bytes(unb64(value["wrap"], "member wrap key", 32))
    except (Refused, ValueError):
        return None
    return {"sign": value["sign"], "wrap": value["wrap"]}


def listed(data) -> dict:
    """{node_id: {"sign", "wrap"}} of a verified members part (malformed rows left out)."""
    rows = (data or {}).get("members") if isinstance(data, dict) else None
    if not isinstance(rows, dict) or len(rows) > MAX_MEMBERS:
        return {}
    out = {}
    for node_id, row in rows.items():
        found = public_of({k: row.get(k) for k in ("sign", "wrap")}) if isinstance(row, dict) else None
        if found is not None:
            out[node_id] = found
    return out


def sealing_key_of(data, fleet_id: str, node_id: str, member: MemberKeys | None, fleet_key: bytes | None,
                   was_listed: bool) -> bytes:
    """The key that opens the sealed parts of a bundle with this members part, for this node.

    Refused not_a_member (this node was listed before and is not now: removed) or
    member_pending (joined, not added by the primary yet)."""
    if not isinstance(data, dict) or not isinstance(data.get("sealing_id"), str):
        raise Refused("malformed", "the bundle's members part has no sealing id")
    row = (data.get("members") or {}).get(node_id) if isinstance(data.get("members"), dict) else None
    if isinstance(row, dict) and member is not None and row.get("sign") == member.public()["sign"]:
        return unwrap(member, fleet_id, data["sealing_id"], node_id, row.get("wrapped"))
    if data["sealing_id"] == LEGACY and fleet_key is not None:
        return fleet_key   # an upgraded primary that has not adopted this node yet
    if was_listed:   # a row under its id with other keys is an earlier membership of the same node
        raise Refused(NOT_A_MEMBER, "this node is no longer a member of the fleet (removed on the primary, or it "
                                    "left): it keeps serving what it applied last and applies nothing more")
    raise Refused(PENDING, "joined: waiting for the primary to add this node to the fleet's members "
                                    "(it reads join claims every poll while a code is open)")


# ---------------------------------------------------------------- signed objects


def _body(doc: dict) -> bytes:
    return canonical({k: v for k, v in doc.items() if k not in (SIGNATURE, wire.MAC)})


def signed_by(doc, public: str | None) -> bool:
    """Whether a parsed object carries a valid signature by `public` (a member's sign key)."""
    if not isinstance(doc, dict) or not isinstance(public, str) or not isinstance(doc.get(SIGNATURE), str):
        return False
    try:
        keys.verify(public, doc[SIGNATURE], _body(doc), "object")
    except (Refused, ValueError, RecursionError):
        return False
    return True


class Authority:
    """How a node signs what it writes to the bucket (statuses, leases) and judges what other
    nodes wrote: signed by a listed member's own key (`known` {node_id: sign key}), or, in
    a fleet without member lists yet (`legacy`), the older MAC under a key derived from the
    fleet key. A node holding the fleet key adds that MAC to what it writes, so a primary
    from before member lists still reads it."""

    def __init__(self, member: MemberKeys | None, fleet_key: bytes | None, purpose: str, known: dict,
                 legacy: bool):
        self.member, self.known, self.legacy = member, known, legacy
        self.mac_key = wire.object_key(fleet_key, purpose) if fleet_key is not None else None

    def write(self, doc: dict) -> bytes:
        out = {k: v for k, v in doc.items() if k not in (SIGNATURE, wire.MAC)}
        if self.member is not None:
            out[SIGNATURE] = keys.sign(self.member.sign, _body(out))
        return wire.with_mac(self.mac_key, out) if self.mac_key is not None else canonical(out)

    def valid(self, doc, node_id) -> bool:
        if isinstance(node_id, str) and signed_by(doc, self.known.get(node_id)):
            return True
        return self.legacy and self.mac_key is not None and wire.mac_ok(self.mac_key, doc)
