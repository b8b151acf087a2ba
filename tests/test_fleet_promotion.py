"""Losing the primary, end to end: kill -9 of the primary, a replica promoted with the
recovery secret, the other replica following the new key, the old primary restarted and
staying quiet; key rotation on a live primary; bundles signed by a key never rotated in
refused (real daemons, SeaweedFS, poll 1 s)."""

import json
import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.clock import rfc3339
from contentnode.fleet import bundle, keys, members, shared
from contentnode.fleet.wire import canonical, loads
from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

PREFIX = "contentnode/"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, host="promote.example.test")
    before = instance.seq()
    instance.site.add_rule("/", prefix="site/")
    instance.site.put("site/a.txt", b"before the promotion", "text/plain")
    instance.wait_synced(after=before)
    yield instance
    instance.close()


def _bundle(fleet) -> dict:
    return json.loads(fleet.bucket_objects()[f"/buckets/{fleet.fleet_bucket}/{PREFIX}bundle.json"])


def _audit(client, action):
    return [e for e in client.get("/api/audit").json["entries"] if e["action"] == action]


def _published_lines(node) -> int:
    return node.log().count("fleet: published bundle")


def _members(fleet) -> list:
    """[(node, admin client, role)] of the fleet's running nodes, the primary first (the tests
    of this module may run in any order, or alone)."""
    found = []
    for index, node in enumerate([fleet.primary, *fleet.replicas]):
        if node.proc is None or node.proc.poll() is not None:
            continue
        client = fleet.admin if index == 0 else fleet.replica_admins[index - 1]
        found.append((node, client, client.get("/api/fleet").json["role"]))
    return sorted(found, key=lambda member: member[2] != "primary")


def test_the_fleet_knows_its_bucket_honours_conditional_writes(fleet):
    view = fleet.admin.get("/api/fleet").json
    assert view["probe"]["conditional_writes"] is True and view["issuer"] == "lease"
    assert [c["name"] for c in view["probe"]["checks"]] == ["create_once", "bucket_clock", "if_match",
                                                            "conditional_delete", "race"]
    again = fleet.admin.post("/api/fleet/probe", {})
    assert again.status == 200 and again.json["conditional_writes"] is True
    assert fleet.replica_admins[0].get("/api/fleet").json["issuer"] is None  # a replica orders nothing


def test_promotion_after_kill_9_of_the_primary(fleet):
    old_secret = fleet.init_answer["recovery_secret"]
    old_primary = fleet.primary
    old_id, epoch = (fleet.admin.get("/api/fleet").json[k] for k in ("node_id", "key_epoch"))
    old_primary.kill()
    first, second = fleet.replica_admins
    first_id = first.get("/api/fleet").json["node_id"]

    # refused: not a recovery secret, one of the right length outside the base64url alphabet,
    # another fleet's, a primary's route on a replica
    for secret, code in [("cnr_not-a-secret", "bad_recovery_secret"), ("cnr_" + "!" * 43, "bad_recovery_secret"),
                         (keys.new_recovery()[0], "bad_recovery_secret")]:
        refused = first.post("/api/fleet/promote", {"recovery_secret": secret})
        assert refused.status == 403 and refused.error_code == code, refused.body
    assert first.post("/api/fleet/rotate-key", {}).error_code == "not_primary"
    audited = _audit(first, "fleet.promote")
    assert [e["ok"] for e in audited] == [False, False, False]
    assert old_secret not in json.dumps(first.get("/api/audit").json)

    promoted = first.post("/api/fleet/promote", {"recovery_secret": old_secret})
    assert promoted.status == 200, promoted.body
    new_secret = promoted.json["recovery_secret"]
    assert promoted.json["role"] == "primary" and promoted.json["key_epoch"] == epoch + 1
    assert new_secret.startswith("cnr_") and new_secret != old_secret
    assert promoted.json["issuer"] == "lease"  # probed before its first bundle (If-Match on the verified one)
    assert new_secret not in first.get("/api/fleet").body.decode()  # shown once
    assert _audit(first, "fleet.promote")[0]["ok"] is True
    assert old_secret not in json.dumps(first.get("/api/audit").json)
    assert new_secret not in json.dumps(first.get("/api/audit").json)

    # the other replica follows the new key and serves a change made on the new primary
    assert second.post("/api/rules", {"domain": fleet.site.host, "path": "/late", "bucket": fleet.site.bucket_id,
                                      "prefix": "late/"}).error_code == "managed_by_fleet"
    created = first.post("/api/rules", {"domain": fleet.site.host, "path": "/late", "bucket": fleet.site.bucket_id,
                                        "prefix": "late/"})
    assert created.status == 201, created.body
    fleet.site.put("late/b.txt", b"after the promotion", "text/plain")
    wait_for(lambda: fleet.served(fleet.replicas[1], "/late/b.txt").status == 200, what="the second replica following")
    view = second.get("/api/fleet").json
    assert view["key_epoch"] == epoch + 1 and view["primary"]["node_id"] == first_id

    # the spent secret is refused, by name, on the node that followed
    reused = second.post("/api/fleet/promote", {"recovery_secret": old_secret})
    assert reused.status == 403 and reused.error_code == "recovery_secret_used", reused.body
    assert _audit(second, "fleet.promote")[0]["ok"] is False

    # the old primary comes back: it sees the higher epoch, steps down, follows, and never publishes
    old_primary.start()
    old_admin = fleet.admin = admin_of(old_primary)
    published_before = _published_lines(old_primary)
    state = wait_for(lambda: (v := old_admin.get("/api/fleet").json)["role"] == "replica" and v,
                     what="the old primary stepping down")
    assert state["last_error"]["code"] in ("demoted", None)
    wait_for(lambda: fleet.served(old_primary, "/late/b.txt").status == 200, what="the old primary following")
    assert old_admin.get("/api/fleet").json["key_epoch"] == epoch + 1
    time.sleep(3)  # three polls
    demoted = old_admin.get("/api/fleet").json["demoted"]  # still says so after the applies since
    assert "another node was promoted" in demoted["message"] and demoted["at"], demoted
    current = _bundle(fleet)
    assert current["primary"] == first_id != old_id and len(current["keys"]) == epoch + 1
    assert _published_lines(old_primary) == published_before
    assert old_admin.post("/api/rules", {"domain": fleet.site.host, "path": "/x", "bucket": fleet.site.bucket_id}
                          ).error_code == "managed_by_fleet"


def test_rotation_on_the_live_primary(fleet):
    (_, primary, role), (_, follower, _) = _members(fleet)[:2]
    assert role == "primary"
    epoch = primary.get("/api/fleet").json["key_epoch"]
    rotated = primary.post("/api/fleet/rotate-key", {})
    assert rotated.status == 200, rotated.body
    assert rotated.json["key_epoch"] == epoch + 1
    wait_for(lambda: follower.get("/api/fleet").json["key_epoch"] == epoch + 1, what="the replica at the new epoch")
    chain = _bundle(fleet)["keys"]
    assert len(chain) == epoch + 1 and chain[-1]["signer"] == "previous"
    assert "recovery_public_key" not in chain[-1]["cert"]
    assert all("recovery_public_key" in e["cert"] for e in chain[1:] if e["signer"] == "recovery")


@pytest.mark.parametrize("forgery", ["unrotated_key_in_chain", "signed_by_a_stranger"])
def test_a_bundle_signed_by_a_key_never_rotated_in_is_refused(fleet, seaweed, forgery):  # noqa: F811
    (primary_node, primary, role), (follower_node, follower, _) = _members(fleet)[:2]
    assert role == "primary"
    current = _bundle(fleet)
    applied = follower.get("/api/fleet").json["seq"]
    rogue = Ed25519PrivateKey.generate()
    chain = list(current["keys"])
    if forgery == "unrotated_key_in_chain":
        chain.append(keys.certify(current["fleet_id"], len(chain) + 1, keys.public_text(rogue),
                                  rfc3339(time.time()), rogue, "previous"))
    forged = {k: v for k, v in current.items() if k != "signature"}
    forged.update(seq=current["seq"] + 1, keys=chain, primary="0000000000000000")
    forged["signature"] = keys.sign(rogue, canonical(forged))
    assert loads(canonical(forged))["seq"] == current["seq"] + 1  # well-formed: only its keys are wrong
    primary_node.kill()  # the primary would overwrite the forgery within a poll: let the replica see it
    seaweed.put_object(fleet.fleet_bucket, PREFIX + "bundle.json", canonical(forged), "application/json")

    expected = "wrong_key_epoch" if forgery == "unrotated_key_in_chain" else "bad_signature"
    error = wait_for(lambda: (follower.get("/api/fleet").json["last_error"] or {}).get("code") == expected
                     or None, timeout=10, what=f"the replica refusing ({expected})")
    assert error
    assert follower.get("/api/fleet").json["seq"] == applied
    assert fleet.served(follower_node, "/a.txt").status == 200  # still serving
    # back, the primary notices the object is not its own, keeps its role, and writes a good one
    primary_node.start()
    primary = admin_of(primary_node)
    if primary_node is fleet.primary:
        fleet.admin = primary
    else:
        fleet.replica_admins[fleet.replicas.index(primary_node)] = primary
    wait_for(lambda: _bundle(fleet)["primary"] != "0000000000000000", what="the primary rewriting bundle.json")
    assert primary.get("/api/fleet").json["role"] == "primary"
    wait_for(lambda: follower.get("/api/fleet").json["seq"] > applied and
             follower.get("/api/fleet").json["last_error"] is None, what="the replica back in step")
    assert shared.CERTIFICATES in _bundle(fleet)["parts"]


def test_two_replicas_promoted_at_once_exactly_one_becomes_primary(tmp_path_factory, seaweed):  # noqa: F811
    fleet = Fleet(tmp_path_factory, seaweed, host="race.example.test")
    try:
        fleet.wait_synced()
        epoch = fleet.admin.get("/api/fleet").json["key_epoch"]
        fleet.primary.kill()
        secret = fleet.init_answer["recovery_secret"]
        for admin in fleet.replica_admins:  # probed beforehand, so both go straight to the bucket
            assert admin.post("/api/fleet/probe", {}).json["conditional_writes"] is True
        start = threading.Barrier(2)
        answers = [None, None]

        def promote(index):
            start.wait(10)
            answers[index] = fleet.replica_admins[index].post("/api/fleet/promote", {"recovery_secret": secret})

        threads = [threading.Thread(target=promote, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        statuses = sorted(a.status for a in answers)
        assert statuses in ([200, 403], [200, 409]), [a.body for a in answers]
        winner = 0 if answers[0].status == 200 else 1
        loser = fleet.replica_admins[1 - winner]
        assert answers[1 - winner].error_code in ("promotion_lost", "recovery_secret_used")
        winner_id = fleet.replica_admins[winner].get("/api/fleet").json["node_id"]
        view = wait_for(lambda: (v := loser.get("/api/fleet").json)["key_epoch"] == epoch + 1 and v,
                        what="the loser following the winner")
        assert view["role"] == "replica" and view["primary"]["node_id"] == winner_id
        assert _bundle(fleet)["primary"] == winner_id
    finally:
        fleet.close()


def test_a_replica_that_never_applied_a_bundle_is_not_promoted(tmp_path_factory, seaweed):  # noqa: F811
    """Its configuration is the one from before it joined: promoted, it would publish that to the fleet."""
    fleet = Fleet(tmp_path_factory, seaweed, replicas=0, host="unapplied.example.test")
    try:
        before = fleet.seq()
        fleet.site.add_rule("/", prefix="site/")
        wait_for(lambda: fleet.seq() > before, what="the primary's first rule published")
        parts = shared.parts_of(fleet.state(fleet.primary))
        rules = json.loads(json.dumps(parts["rules"]))
        next(iter(rules.values()))["bucket"] = "no-such-bucket"   # every replica refuses it (restore checks)
        node = FleetNode(str(tmp_path_factory.mktemp("unapplied"))).start()
        fleet.replicas.append(node)
        admin = admin_of(node)
        code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
        with fleet.primary_paused():   # a live primary writes over the bundle made here at its next poll
            assert admin.post("/api/fleet/join", {"code": code}).status == 200
            # the bundle names the joiner a member (the paused primary cannot add it)
            joiner = {fleet.state(node)["node"]["id"]: members.load(node.data_dir).public()}
            fleet.put_bundle(fleet.forge(parts=dict(parts, rules=rules), extra_members=joiner))
            published = fleet.bucket_client().get_bytes(PREFIX + "bundle.json").body
            wait_for(lambda: (admin.get("/api/fleet").json["last_error"] or {}).get("code") == "restore_checks",
                     what="the new replica refusing the bundle")
            fleet.primary.kill()
        refused = admin.post("/api/fleet/promote", {"recovery_secret": fleet.init_answer["recovery_secret"]})
        assert refused.status == 409 and refused.error_code == "never_applied", refused.body
        view = admin.get("/api/fleet").json
        assert view["role"] == "replica" and view["key_epoch"] == 1 and view["seq"] == 0 and view["probe"] is None
        assert fleet.bucket_client().get_bytes(PREFIX + "bundle.json").body == published
        assert [e["ok"] for e in _audit(admin, "fleet.promote")] == [False]
    finally:
        fleet.close()
