"""A promotion takes over the members and the join codes (docs/API.md, Fleet): the old
primary killed, a replica promoted with the recovery secret issues a new sealing key for the
members it took from the bundle, and knows the old primary's join codes, so an unused one still
joins and a revoked one stays refused (real daemons, SeaweedFS, poll 1 s)."""

from contentnode.fleet import bundle, members
from tests.fleet_setup import FleetNode, admin_of, serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

fleet = serving_fleet_fixture(replicas=2)


def _part(fleet) -> dict:
    return fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]


def test_a_promoted_primary_seals_anew_and_keeps_the_old_primarys_join_codes(fleet, tmp_path):
    unused = fleet.admin.post("/api/fleet/join-codes", {}).json
    revoked = fleet.admin.post("/api/fleet/join-codes", {}).json
    assert fleet.admin.delete(f"/api/fleet/join-codes/{revoked['id']}").status == 204
    # the bundle carries the codes' state (published within a poll of each change)
    wait_for(lambda: [c["id"] for c in _part(fleet)["join_codes"] if not c["used_by"]] == [unused["id"]]
             and [c["id"] for c in _part(fleet)["join_revoked"]] == [revoked["id"]],
             what="the bundle carrying the join codes' state")
    fleet.wait_synced()
    before = _part(fleet)
    fleet.primary.kill()

    promoted, follower = fleet.replica_admins
    answer = promoted.post("/api/fleet/promote", {"recovery_secret": fleet.init_answer["recovery_secret"]})
    assert answer.status == 200, answer.body
    after = wait_for(lambda: (p := _part(fleet))["sealing_id"] != before["sealing_id"] and p, 20,
                     what="the promoted primary publishing under a new sealing key")
    assert set(after["members"]) == set(before["members"])   # the old primary stays listed until removed
    listed = {c["id"]: c for c in promoted.get("/api/fleet/join-codes").json["join_codes"]}
    assert revoked["id"] not in listed and listed[unused["id"]]["used_at"] is None
    assert set(listed[unused["id"]]) == {"id", "created_at", "expires_at", "used_at", "used_by"}
    wait_for(lambda: follower.get("/api/fleet").json["seq"] == promoted.get("/api/fleet").json["seq"], 20,
             what="the other replica following the promoted primary")
    assert follower.get("/api/fleet").json["last_error"] is None

    node = FleetNode(str(tmp_path)).start()
    fleet.replicas.append(node)
    joiner = admin_of(node)
    refused = joiner.post("/api/fleet/join", {"code": revoked["code"]})
    assert refused.status == 403 and refused.error_code == "join_code_revoked", refused.body
    joined = joiner.post("/api/fleet/join", {"code": unused["code"]})
    assert joined.status == 200, joined.body
    node_id = joiner.get("/api/fleet").json["node_id"]
    used = wait_for(lambda: (c := {r["id"]: r for r in promoted.get("/api/fleet/join-codes").json["join_codes"]}
                             [unused["id"]])["used_by"] and c, 20, what="the new primary marking the old code used")
    assert used["used_by"] == node_id
    wait_for(lambda: joiner.get("/api/fleet").json["seq"] == promoted.get("/api/fleet").json["seq"]
             and joiner.get("/api/fleet").json["last_error"] is None, 20, what="the new member applying")
    part = _part(fleet)
    assert node_id in part["members"] and part["members"][node_id]["sign"] == members.load(node.data_dir).public()["sign"]
    (tmp_path / "second").mkdir()
    second = FleetNode(str(tmp_path / "second")).start()
    fleet.replicas.append(second)
    reused = admin_of(second).post("/api/fleet/join", {"code": unused["code"]})
    assert reused.status == 403 and reused.error_code == "join_code_used", reused.body
