"""Fleet members with their own keys (docs/API.md, Fleet): the signed bundle names every member
with its public keys, statuses are signed by their node's key, and removing a node (DELETE
/api/fleet/nodes/{node_id}) or a node's leave replaces the sealing key, wrapped for the remaining
members only. A primary, two replicas and SeaweedFS on loopback, poll 1 s."""

import json
import os
import time
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from contentnode.core import netguard
from contentnode.fleet import bundle, joinclaims, joincode, keys, members
from contentnode.fleet.wire import Refused, canonical
from tests.fleet_setup import opens_sealed, serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

fleet = serving_fleet_fixture(replicas=3)
PREFIX = "contentnode/"


def _node_id(fleet, node) -> str:
    return fleet.state(node)["node"]["id"]


def _member_keys(node) -> members.MemberKeys:
    loaded = members.load(node.data_dir)
    assert loaded is not None
    return loaded


def _sealing_key(doc: dict, node_id: str, keys_: members.MemberKeys) -> bytes:
    """What a node holding `keys_` can unwrap from a bundle's members part (Refused when nothing)."""
    part = doc["parts"][bundle.MEMBERS]["data"]
    row = part["members"].get(node_id)
    if row is None:
        raise Refused(members.NOT_A_MEMBER, "not listed")
    return members.unwrap(keys_, doc["fleet_id"], part["sealing_id"], node_id, row["wrapped"])


def _listed_nodes(fleet) -> list:
    return [row["node_id"] for row in fleet.admin.get("/api/fleet").json["nodes"]]


def test_every_member_is_named_in_the_bundle_with_its_own_public_keys(fleet):
    doc = fleet.member_bundle()
    part = doc["parts"][bundle.MEMBERS]["data"]
    nodes = [fleet.primary, *fleet.replicas]
    assert set(part["members"]) == {_node_id(fleet, node) for node in nodes}
    for node in nodes:
        node_id, own = _node_id(fleet, node), _member_keys(node)
        row = part["members"][node_id]
        assert {"sign": row["sign"], "wrap": row["wrap"]} == own.public()
        assert opens_sealed(doc, _sealing_key(doc, node_id, own))   # each unwraps the one sealing key
        mode = os.stat(os.path.join(node.data_dir, "fleet", "member.key")).st_mode & 0o777
        assert mode == 0o600
    # the statuses in the bucket are signed by their node's own key, and carry no fleet-key mac
    client = fleet.bucket_client()
    for node in fleet.replicas:
        status = json.loads(client.get_bytes(f"{PREFIX}nodes/{_node_id(fleet, node)}.json").body)
        assert "mac" not in status and members.signed_by(status, _member_keys(node).public()["sign"])
    assert not os.path.exists(os.path.join(fleet.replicas[0].data_dir, "fleet", "fleet.key"))


def test_a_status_not_signed_by_a_listed_member_is_counted_not_listed(fleet):
    """A status signed by a key the primary does not list (a bucket writer's, a removed node's),
    and one whose signature is by a member but under another node's id."""
    client = fleet.bucket_client()
    (member_id, member_keys), = fleet.add_members(1)
    before = set(_listed_nodes(fleet))
    base = fleet.admin.get("/api/fleet").json["unknown_statuses"]
    stranger = members.MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())
    intruder_id, impostor_id = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc = {"name": "intruder", "role": "replica", "version": "0", "seq": 1, "seen_at": now, "poll_seconds": 1}
    by_stranger = members.Authority(stranger, None, "status", {}, legacy=False)
    by_member = members.Authority(member_keys, None, "status", {}, legacy=False)
    for node_id, signer in ((intruder_id, by_stranger), (impostor_id, by_member), (member_id, by_member)):
        client.put_object(f"{PREFIX}nodes/{node_id}.json", signer.write(dict(doc, node_id=node_id)),
                          "application/json")
    answer = wait_for(lambda: (a := fleet.admin.get("/api/fleet").json)["unknown_statuses"] == base + 2
                      and member_id in [r["node_id"] for r in a["nodes"]] and a, 20,
                      what="the two others' statuses counted, the member's listed")
    assert {intruder_id, impostor_id}.isdisjoint(row["node_id"] for row in answer["nodes"])
    assert set(_listed_nodes(fleet)) == before | {member_id}
    assert fleet.admin.delete(f"/api/fleet/nodes/{member_id}").status == 204
    for node_id in (intruder_id, impostor_id):
        client.delete_object(f"{PREFIX}nodes/{node_id}.json")


def test_removing_a_replica_replaces_the_sealing_key_it_cannot_open(fleet):
    removed, kept = fleet.replicas[0], fleet.replicas[1]
    removed_id, removed_admin, kept_admin = _node_id(fleet, removed), fleet.replica_admins[0], fleet.replica_admins[1]
    made = fleet.admin.post("/api/buckets", fleet.seaweed.bucket_definition(fleet.site.bucket,
                                                                            name="rotated secret"))
    assert made.status == 201, made.body
    fleet.wait_synced(after=fleet.seq() - 1)
    before = fleet.member_bundle()
    old_key = _sealing_key(before, removed_id, _member_keys(removed))   # what the removed node could unwrap

    refused = removed_admin.delete(f"/api/fleet/nodes/{_node_id(fleet, kept)}")
    assert refused.status == 409 and refused.error_code == "managed_by_fleet"
    assert fleet.admin.delete("/api/fleet/nodes/0123456789abcdef").status == 404
    own = fleet.admin.delete(f"/api/fleet/nodes/{_node_id(fleet, fleet.primary)}")
    assert own.status == 409 and own.error_code == "is_primary"
    assert fleet.admin.delete(f"/api/fleet/nodes/{removed_id}").status == 204
    assert removed_id not in _listed_nodes(fleet)
    assert any(e["action"] == "fleet.node_remove" and e["target"] == removed_id
               for e in fleet.admin.get("/api/audit").json["entries"])

    secret = "rotated-" + uuid.uuid4().hex
    seq = fleet.seq()
    assert fleet.admin.put(f"/api/buckets/{made.json['id']}", {"secret_key": secret}).status == 200
    wait_for(lambda: fleet.seq() > seq, what="the primary publishing the new secret")
    wait_for(lambda: secret in open(os.path.join(kept.data_dir, "state.json")).read(), 20,
             what="the remaining replica applying the new secret")
    view = wait_for(lambda: (v := removed_admin.get("/api/fleet").json)["removed"] and v, 20,
                    what="the removed node saying it is no longer a member")
    assert view["last_error"]["code"] == "not_a_member" and view["role"] == "replica"
    assert "no longer a member" in removed.log()
    after = fleet.member_bundle()
    part = after["parts"][bundle.MEMBERS]["data"]
    assert removed_id not in part["members"] and part["sealing_id"] != before["parts"][bundle.MEMBERS]["data"]["sealing_id"]
    assert not opens_sealed(after, old_key)
    assert opens_sealed(after, _sealing_key(after, _node_id(fleet, kept), _member_keys(kept)))
    time.sleep(3)   # more polls: it still never applies (nor holds) the new secret
    assert secret not in open(os.path.join(removed.data_dir, "state.json")).read()
    assert removed_admin.get("/api/fleet").json["seq"] < fleet.seq()
    assert removed_id not in _listed_nodes(fleet)
    assert kept_admin.get("/api/fleet").json["removed"] is None


def test_a_replica_that_leaves_is_removed_and_the_sealing_key_replaced(fleet):
    leaver, index = fleet.replicas[2], 2
    leaver_id = _node_id(fleet, leaver)
    before = fleet.member_bundle()
    old_key = _sealing_key(before, leaver_id, _member_keys(leaver))
    assert fleet.replica_admins[index].post("/api/fleet/leave", {}).status == 200
    assert members.load(leaver.data_dir) is None   # its keys go with it
    after = wait_for(lambda: leaver_id not in (d := fleet.member_bundle())["parts"][bundle.MEMBERS]["data"]["members"]
                     and d, 20, what="the primary removing the node that left")
    assert after["parts"][bundle.MEMBERS]["data"]["sealing_id"] != before["parts"][bundle.MEMBERS]["data"]["sealing_id"]
    assert not opens_sealed(after, old_key)
    assert leaver_id not in _listed_nodes(fleet)
    assert "it left" in fleet.primary.log()


def test_rotate_key_replaces_the_sealing_key_and_members_follow(fleet):
    kept = fleet.replicas[1]
    before = fleet.member_bundle()
    seq = fleet.seq()
    assert fleet.admin.post("/api/fleet/rotate-key", {}).status == 200
    wait_for(lambda: fleet.seq() > seq, what="the primary publishing under the new key")
    after = fleet.member_bundle()
    old_key = _sealing_key(before, _node_id(fleet, kept), _member_keys(kept))
    assert after["parts"][bundle.MEMBERS]["data"]["sealing_id"] != before["parts"][bundle.MEMBERS]["data"]["sealing_id"]
    assert not opens_sealed(after, old_key)
    wait_for(lambda: fleet.synced([fleet.replica_admins[1]]), 20, what="the remaining replica at the new seq")


@pytest.mark.parametrize("shape", ["unsigned", "signed-by-another-key"])
def test_a_bucket_writer_cannot_add_a_member_through_a_join_claim(fleet, shape):
    """A claim counts only when signed with an open code's claim key: one written by a bucket writer
    (for a used code, unsigned or signed by a key of its own) adds no member."""
    count = fleet.admin.get("/api/fleet").json["members"]
    used = next(c for c in fleet.admin.get("/api/fleet/join-codes").json["join_codes"] if c["used_by"])
    intruder = members.MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())
    claim = {"id": used["id"], "node_id": uuid.uuid4().hex[:16], "claimed_at": "2020-01-01T00:00:00Z",
             "keys": intruder.public()}
    if shape == "signed-by-another-key":
        claim["signature"] = keys.sign(Ed25519PrivateKey.generate(), canonical(claim))
    fleet.bucket_client().put_object(f"{PREFIX}claims/{used['id']}.json", canonical(claim), "application/json")
    time.sleep(3)
    assert fleet.admin.get("/api/fleet").json["members"] == count
    assert claim["node_id"] not in fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]["members"]


def test_a_join_code_holder_cannot_take_over_an_existing_members_id(fleet):
    """A claim signed with a valid unused code's real claim key (what whoever holds the code can
    write) that names a listed member which has not left: the primary refuses it, the member keeps
    its keys and goes on applying new bundles, and the code is used up (docs/API.md, Fleet)."""
    victim, victim_admin = fleet.replicas[1], fleet.replica_admins[1]
    victim_id = _node_id(fleet, victim)
    own = _member_keys(victim).public()
    before = fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]
    assert {k: before["members"][victim_id][k] for k in ("sign", "wrap")} == own
    made = fleet.admin.post("/api/fleet/join-codes", {}).json
    join_id, payload = joincode.redeem(made["code"], netguard.OutboundPolicy(), time.time())
    intruder = members.MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())
    joinclaims.write_claim(fleet.bucket_client(), PREFIX, join_id, payload["claim_key"], victim_id, time.time(),
                           intruder.public())
    code = wait_for(lambda: (c := next(r for r in fleet.admin.get("/api/fleet/join-codes").json["join_codes"]
                                       if r["id"] == join_id))["used_at"] and c, 20,
                    what="the primary reading the claim and using the code up")
    assert code["used_by"] == victim_id
    after = fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]
    assert {k: after["members"][victim_id][k] for k in ("sign", "wrap")} == own
    assert after["sealing_id"] == before["sealing_id"]
    assert f"join code {join_id} names node {victim_id}" in fleet.primary.log()
    # the member goes on applying what the primary publishes
    secret = "kept-" + uuid.uuid4().hex
    seq = fleet.seq()
    made_bucket = fleet.admin.post("/api/buckets", dict(
        fleet.seaweed.bucket_definition(fleet.site.bucket, name="after the refused claim"), secret_key=secret))
    assert made_bucket.status == 201, made_bucket.body
    wait_for(lambda: fleet.seq() > seq, what="the primary publishing the new bucket")
    # waits for the bucket itself: a bundle published between the read of seq and the bucket's
    # creation moves seq too, and a member at that seq does not have the bucket yet
    wait_for(lambda: secret in open(os.path.join(victim.data_dir, "state.json")).read(), 20,
             what="the member applying the bundle published after the refused claim")
    view = victim_admin.get("/api/fleet").json
    assert view["last_error"] is None and view["removed"] is None
    time.sleep(3)   # more polls of the primary: the refused claim stays refused
    assert victim_id in _listed_nodes(fleet)
    assert {k: fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]["members"][victim_id][k]
            for k in ("sign", "wrap")} == own
