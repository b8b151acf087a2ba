"""Bundles a replica must refuse (each one hand-made with the fleet's real keys and put in
the bucket), the bucket going down and coming back, a kill -9 during an apply, and a
key epoch from the recovery key that makes the old primary step down."""

import json
import os
import time
import uuid

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.clock import rfc3339
from contentnode.fleet import keys, publisher, shared
from contentnode.fleet.wire import canonical
from tests.fleet_setup import serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


fleet = serving_fleet_fixture(replicas=1)


def replica_view(fleet):
    return fleet.replica_admins[0].get("/api/fleet").json


def _tampered(fleet):
    doc = json.loads(fleet.forge())
    rule = next(iter(doc["parts"]["rules"]["data"].values()))
    rule["prefix"] = "elsewhere/"
    return canonical(doc)


def _bad_restore(fleet):
    parts = shared.parts_of(fleet.state(fleet.primary))
    rules = json.loads(json.dumps(parts["rules"]))
    next(iter(rules.values()))["bucket"] = "no-such-bucket"
    return fleet.forge(parts=dict(parts, rules=rules))


def _other_epoch(fleet):
    intruder = Ed25519PrivateKey.generate()
    state = fleet.state(fleet.primary)["fleet"]
    chain = state["key_certs"] + [keys.certify(state["fleet_id"], 2, keys.public_text(intruder), rfc3339(time.time()),
                                               Ed25519PrivateKey.generate(), "previous")]
    return fleet.forge(signing=intruder, key_certs=chain)


def _not_a_number(fleet):
    """A bare NaN (Python's JSON extension) where a rule's cache_ttl stands: canonical bytes cannot hold it."""
    doc = json.loads(fleet.forge())
    next(iter(doc["parts"]["rules"]["data"].values()))["cache_ttl"] = float("nan")
    return json.dumps(doc).encode()


def _deeply_nested(fleet):
    doc = json.loads(fleet.forge())
    doc["keys"] = "NESTED"
    return json.dumps(doc).encode().replace(b'"NESTED"', b"[" * 50000 + b"]" * 50000)


CASES = {
    "tampered": (_tampered, "bad_signature"),
    "half-written": (lambda f: (raw := f.forge())[:len(raw) // 2], "malformed"),
    "older": (lambda f: f.forge(seq_delta=-1), "older_seq"),
    "expired": (lambda f: f.forge(issued_at=time.time() - 2 * publisher.LIFETIME_SECONDS), "expired"),
    "other-fleet": (lambda f: f.forge(fleet_id=uuid.uuid4().hex[:16]), "other_fleet"),
    "wrong-key-epoch": (_other_epoch, "wrong_key_epoch"),
    "signed-by-another-key": (lambda f: f.forge(signing=Ed25519PrivateKey.generate()), "bad_signature"),
    "sealed-under-another-fleet-key": (lambda f: f.forge(fleet_key=os.urandom(32)), "sealed_part"),
    "fails-the-restore-checks": (_bad_restore, "restore_checks"),
    "not-a-number": (_not_a_number, "malformed"),
    "nested-too-deeply": (_deeply_nested, "malformed"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_bundle_is_refused_reported_and_never_applied(fleet, case):
    make, code = CASES[case]
    before = replica_view(fleet)
    rules_before = fleet.state(fleet.replicas[0])["rules"]
    raw = make(fleet)
    with fleet.primary_paused():   # a live primary writes over it at its next poll
        fleet.put_bundle(raw)
        view = wait_for(lambda: (v := replica_view(fleet))["last_error"] and v["last_error"]["code"] == code and v,
                        10, what=f"the replica reporting {code}")
    assert view["seq"] == before["seq"]
    assert fleet.state(fleet.replicas[0])["rules"] == rules_before
    assert fleet.served(fleet.replicas[0], "/hello.txt").body == b"hello"
    # the primary's next bundle (any change) is applied and clears the error
    before = fleet.seq()
    fleet.site.add_rule(f"/{case}", prefix="site/")
    fleet.wait_synced(after=before)
    assert replica_view(fleet)["last_error"] is None


def test_the_primary_publishes_over_a_bundle_json_holding_nan(fleet):
    """Such an object is damaged, not another primary's: the next change is written over it."""
    fleet.put_bundle(_not_a_number(fleet))
    before = fleet.seq()
    fleet.site.add_rule("/over-nan", prefix="site/")
    fleet.wait_synced(after=before)
    published = json.loads(fleet.bucket_client().get_bytes("contentnode/bundle.json").body)
    assert published["seq"] == fleet.seq() > before
    assert fleet.admin.get("/api/fleet").json["last_error"] is None
    assert fleet.served(fleet.replicas[0], "/over-nan/hello.txt").body == b"hello"


def test_the_bucket_stopped_and_restarted(fleet):
    replica = fleet.replicas[0]
    assert fleet.served(replica, "/hello.txt").body == b"hello"  # now cached
    rules = len(fleet.replica_admins[0].get("/api/rules").json["rules"])
    seq = replica_view(fleet)["seq"]
    logged = len(replica.log())
    with fleet.seaweed.stopped():
        wait_for(lambda: (replica_view(fleet)["last_error"] or {}).get("code") == "bucket_error", 10,
                 what="the replica reporting the bucket down")
        time.sleep(3)  # several failed polls: still one notification
        assert fleet.served(replica, "/hello.txt").body == b"hello"
        assert replica.log()[logged:].count("event fleet_sync_failed") == 1
        replica.stop()
        replica.start()  # restarted with the bucket down: its last applied configuration
        fleet.replica_admins[0] = admin = fleet.replica_admins[0].__class__(replica)
        assert admin.login("admin", "correct horse battery staple").status == 200
        assert len(admin.get("/api/rules").json["rules"]) == rules and replica_view(fleet)["seq"] == seq
        assert fleet.served(replica, "/hello.txt").body == b"hello"
        before = fleet.seq()
        fleet.site.add_rule("/while-down", prefix="site/")  # the primary cannot publish yet
    fleet.wait_synced(timeout=25, after=before)  # the primary retries, the replica recovers from its backoff
    assert fleet.served(replica, "/while-down/hello.txt").body == b"hello"
    assert replica_view(fleet)["last_error"] is None


def test_the_offline_restore_is_refused_on_a_replica(fleet, tmp_path):
    """As POST /api/backup/restore is (409 managed_by_fleet): its shared objects are the primary's."""
    replica = fleet.replicas[0]
    replica.stop()
    try:
        before = fleet.state(replica)
        target = str(tmp_path / "replica.json")
        assert replica.cli("backup", "export", target).returncode == 0
        refused = replica.cli("backup", "restore", target)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert refused.stderr.startswith("contentnode: restore refused, nothing changed: this node is a fleet "
                                         "replica"), refused.stderr
        assert "leave the fleet first" in refused.stderr and before["fleet"]["primary"] in refused.stderr
        assert fleet.state(replica) == before
        assert not [name for name in os.listdir(replica.data_dir) if name.startswith("pre-restore")]
    finally:
        replica.start()
        fleet.replica_admins[0] = admin = fleet.replica_admins[0].__class__(replica)
        assert admin.login("admin", "correct horse battery staple").status == 200


@pytest.mark.parametrize("delay", [0.2, 0.6, 1.0, 1.4])
def test_kill_9_during_an_apply_leaves_old_or_new_never_a_mix(fleet, delay):
    replica = fleet.replicas[0]
    variant = f"v{int(delay * 10)}x"
    fleet.wait_synced()   # the primary's bundle over the previous case's is applied before `old` is read
    old = fleet.state(replica)
    big = fleet.forge(seq_delta=1 + int(delay * 10), parts=fleet.big_parts(variant))
    with fleet.primary_paused():   # the primary would write its own bundle over the one made here
        fleet.put_bundle(big)
        time.sleep(delay)
        replica.kill()
        state = fleet.state(replica)
        added = [rule for rule in state["rules"].values() if rule["prefix"] == f"{variant}/"]
        if state["fleet"]["seq"] == old["fleet"]["seq"]:
            assert state["rules"] == old["rules"] and not added
        else:
            assert len(added) == 10000
        replica.start()
        fleet.replica_admins[0] = admin = fleet.replica_admins[0].__class__(replica)
        assert admin.login("admin", "correct horse battery staple").status == 200
        wait_for(lambda: sum(r["prefix"] == f"{variant}/" for r in fleet.state(replica)["rules"].values()) == 10000,
                 20, what="the big bundle applied after the restart")
    assert fleet.served(replica, "/hello.txt").body == b"hello"


def test_a_key_epoch_from_the_recovery_key_is_followed_and_the_old_primary_steps_down(fleet):
    # a bundle a previous test put is written over by the primary at its next poll: forged before
    # that, the new key's bundle could be the one written over (the replica at the primary's seq
    # means the primary's own bundle is the one in the bucket)
    wait_for(lambda: fleet.synced(), 20, what="the replica at the primary's own bundle")
    state = fleet.state(fleet.primary)["fleet"]
    successor = Ed25519PrivateKey.generate()
    recovery = keys.recovery_key(fleet.init_answer["recovery_secret"])
    chain = state["key_certs"] + [keys.certify(state["fleet_id"], 2, keys.public_text(successor),
                                               rfc3339(time.time()), recovery, "recovery")]
    fleet.put_bundle(fleet.forge(seq_delta=50, signing=successor, key_certs=chain))
    wait_for(lambda: replica_view(fleet)["key_epoch"] == 2, 20, what="the replica at key epoch 2")
    assert replica_view(fleet)["last_error"] is None
    # the old primary, idle, finds the new key's bundle at its next poll's check of bundle.json
    view = wait_for(lambda: (v := fleet.admin.get("/api/fleet").json)["role"] == "replica" and v, 20,
                    what="the old primary stepping down")
    # it said why (its next apply, of the new key's bundle, may already have cleared last_error)
    assert (view["last_error"] or {}).get("code") == "demoted" or "fleet: demoted:" in fleet.primary.log()
    assert not os.path.exists(os.path.join(fleet.primary.data_dir, "fleet", "signing.key"))
    bundle_doc = json.loads(fleet.bucket_client().get_bytes("contentnode/bundle.json").body)
    assert len(bundle_doc["keys"]) == 2  # never overwritten by the old key
    assert fleet.admin.post("/api/rules", {"domain": fleet.site.host, "path": "/x", "bucket": "b"}).status == 409
