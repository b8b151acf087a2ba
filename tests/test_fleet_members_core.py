"""Member keys without processes: wrapping the sealing key per member, what a replica opens
under each kind of bundle (a primary from before member lists, an upgraded one still sealing
under its fleet key, a member list), and the statuses' signatures against the MAC of older
fleets (docs/API.md, Fleet: upgrading). The end-to-end tests are in test_fleet_members.py."""

import os
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from contentnode.fleet import bundle, follower, joinclaims, members, shared, wire
from contentnode.fleet.wire import Refused
from tests.test_fleet_core import FLEET, _chain, _parts


def _member():
    return members.MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())


def _bundle(listed: dict | None, sealing_id: str, key: bytes, seq: int = 1):
    """(raw bundle, pin): sealed under `key`, with a members part listing `listed` (none when None)."""
    signing, certs, pin, _ = _chain()
    parts = _parts()
    if listed is not None:
        parts[bundle.MEMBERS] = members.part(FLEET, sealing_id, key, {n: m.public() for n, m in listed.items()}, {})
    raw = bundle.build(fleet_id=FLEET, seq=seq, issued_at=time.time(), lifetime=3600, primary="p", key_certs=certs,
                       signing=signing, fleet_key=key, parts=parts, sealed=shared.SEALED)
    return raw, pin


def _open(raw, pin, node_id, member, fleet_key, listed_before=False):
    key_of = follower.sealing_key({"fleet_id": FLEET, "listed": listed_before}, node_id, member, fleet_key)
    return bundle.open_bundle(bundle.parse(raw, FLEET, pin), fleet_id=FLEET, pin=pin, fleet_key=key_of,
                              applied_seq=0, now=time.time(), names=shared.PARTS, sealed=shared.SEALED)


def test_each_member_unwraps_the_sealing_key_and_no_one_else_does():
    a, b, outsider = _member(), _member(), _member()
    key = os.urandom(32)
    raw, pin = _bundle({"aaaa": a, "bbbb": b}, "s1", key)
    assert _open(raw, pin, "aaaa", a, None).parts["buckets"] == _parts()["buckets"]
    assert _open(raw, pin, "bbbb", b, None).parts["buckets"] == _parts()["buckets"]
    with pytest.raises(Refused) as pending:   # joined, not listed yet
        _open(raw, pin, "cccc", outsider, None)
    assert pending.value.code == "member_pending"
    with pytest.raises(Refused) as removed:   # listed before, not now
        _open(raw, pin, "cccc", outsider, None, listed_before=True)
    assert removed.value.code == members.NOT_A_MEMBER
    with pytest.raises(Refused) as other:     # its id listed with other keys: an earlier membership
        _open(raw, pin, "aaaa", outsider, None)
    assert other.value.code == "member_pending"
    with pytest.raises(Refused) as gone:
        _open(raw, pin, "aaaa", outsider, None, listed_before=True)
    assert gone.value.code == members.NOT_A_MEMBER
    part = bundle.parse(raw, FLEET, pin)["parts"][bundle.MEMBERS]["data"]
    with pytest.raises(Refused):              # a wrap moved to another node id does not open
        members.unwrap(b, FLEET, "s1", "bbbb", part["members"]["aaaa"]["wrapped"])
    assert key.hex() not in raw.decode() and wire.b64(key) not in raw.decode()


def test_a_bundle_from_a_primary_before_member_lists_opens_with_the_fleet_key():
    """Upgrading: replicas first. A new replica joined to an older primary holds the fleet key
    from the join code and opens that primary's bundles (no members part) with it."""
    fleet_key = os.urandom(32)
    raw, pin = _bundle(None, "", fleet_key)
    assert _open(raw, pin, "aaaa", _member(), fleet_key).parts["buckets"] == _parts()["buckets"]
    with pytest.raises(Refused) as refused:
        _open(raw, pin, "aaaa", _member(), None)
    assert refused.value.code == "sealed_part"


def test_an_upgraded_primary_seals_under_the_fleet_key_until_its_first_rotation():
    """Then the primary: until it replaces the sealing key it lists itself and the nodes it adopted,
    and a node it has not adopted yet still opens with the fleet key; after the first rotation
    only listed members do (a former member holding the fleet key is out)."""
    fleet_key, primary, old = os.urandom(32), _member(), _member()
    raw, pin = _bundle({"pppp": primary}, members.LEGACY, fleet_key)
    assert _open(raw, pin, "oooo", old, fleet_key).seq == 1
    rotated, pin = _bundle({"pppp": primary}, "after", os.urandom(32), seq=2)
    with pytest.raises(Refused) as refused:
        _open(rotated, pin, "oooo", old, fleet_key)
    assert refused.value.code == "member_pending"


def test_statuses_are_signed_by_their_member_and_the_older_mac_counts_only_in_an_older_fleet():
    a, outsider, fleet_key = _member(), _member(), os.urandom(32)
    known = {"aaaa": a.public()["sign"]}
    doc = {"node_id": "aaaa", "seq": 3}
    judge = members.Authority(None, None, "status", known, legacy=False)
    signed = wire.loads(members.Authority(a, None, "status", {}, legacy=False).write(doc))
    assert judge.valid(signed, "aaaa") and not judge.valid(signed, "bbbb")
    assert not judge.valid(dict(signed, seq=4), "aaaa")
    forged = wire.loads(members.Authority(outsider, None, "status", {}, legacy=False).write(doc))
    assert not judge.valid(forged, "aaaa")
    # a node that joined an older primary writes both: the older primary checks the MAC it knows
    both = wire.loads(members.Authority(a, fleet_key, "status", {}, legacy=True).write(doc))
    assert wire.mac_ok(wire.object_key(fleet_key, "status"), both) and judge.valid(both, "aaaa")
    mac_only = wire.loads(wire.with_mac(wire.object_key(fleet_key, "status"), {"node_id": "cccc"}))
    assert members.Authority(None, fleet_key, "status", {}, legacy=True).valid(mac_only, "cccc")
    # once the fleet seals under a member-wrapped key, holding the fleet key writes nothing accepted
    assert not members.Authority(None, fleet_key, "status", {}, legacy=False).valid(mac_only, "cccc")


def test_a_claim_for_a_listed_id_needs_that_members_own_signed_leave():
    """fleet/joinclaims.py left_by: what the primary takes as a listed member's leave in a claim."""
    member, other = _member(), _member()
    row = member.public()
    leave = {"node_id": "aaaa", "left": True, "seen_at": "2026-01-01T00:00:00Z"}
    signed = wire.loads(members.Authority(member, None, "status", {}, legacy=False).write(leave))
    assert joinclaims.left_by(signed, "aaaa", row)
    assert joinclaims.left_by(None, "aaaa", None)                 # not listed: nothing to leave
    assert not joinclaims.left_by(None, "aaaa", row)              # listed, no leave
    by_other = wire.loads(members.Authority(other, None, "status", {}, legacy=False).write(leave))
    assert not joinclaims.left_by(by_other, "aaaa", row)          # signed by keys it is not listed with
    assert not joinclaims.left_by(signed, "bbbb", row)            # another node's leave
    status = wire.loads(members.Authority(member, None, "status", {}, legacy=False).write(dict(leave, left=None)))
    assert not joinclaims.left_by(status, "aaaa", row)            # a status that is not a leave
    assert not joinclaims.left_by(dict(signed, seen_at="2027-01-01T00:00:00Z"), "aaaa", row)   # altered
