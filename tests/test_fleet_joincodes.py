"""Join codes are single-use, listed and revocable (docs/API.md, Fleet): a primary and joining
nodes on loopback, SeaweedFS as the bucket, poll 1 s. The primary learns of a use only through
the bucket (the joiner's signed claim); a second joiner learns it from the code's tombstone, the
primary's signed joins.json, or the first joiner's claim."""

import os

import pytest

from tests.fleet_setup import FleetNode, admin_of, serving_fleet_fixture, wait_for
from tests.inprocess import InProcessNode
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

fleet = serving_fleet_fixture(replicas=0)
PREFIX = "contentnode/"


@pytest.fixture
def joiners(tmp_path):
    """Two standalone nodes, signed in, closed after the test: built in the test process (they only
    speak HTTP; the fleet's primary is a daemon, stopped and started by one test)."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    nodes = [InProcessNode(str(tmp_path / name), env=FleetNode.poll_env).start() for name in ("a", "b")]
    try:
        yield [(node, admin_of(node)) for node in nodes]
    finally:
        for node in nodes:
            node.close()


def _listed(fleet, join_id):
    return next((c for c in fleet.admin.get("/api/fleet/join-codes").json["join_codes"] if c["id"] == join_id), None)


def _refused(client, code, error, dry_run=False):
    response = client.post("/api/fleet/join", {"code": code, "dry_run": dry_run})
    assert response.status == 403 and response.error_code == error, response.body
    assert response.json["error"]["field"] == "code"
    assert client.get("/api/fleet").json["role"] == "standalone"


def _mint(fleet):
    minted = fleet.admin.post("/api/fleet/join-codes", {})
    assert minted.status == 201, minted.body
    return minted.json["id"], minted.json["code"]


def test_a_code_is_listed_without_its_secret_and_joins_one_node_only(fleet, joiners):
    (node_a, a), (node_b, b) = joiners
    join_id, code = _mint(fleet)
    listing = fleet.admin.get("/api/fleet/join-codes")
    assert listing.status == 200 and code not in listing.body.decode()
    row = _listed(fleet, join_id)
    assert set(row) == {"id", "created_at", "expires_at", "used_at", "used_by"}
    assert row["used_at"] is None and row["used_by"] is None and row["created_at"] < row["expires_at"]
    assert a.post("/api/fleet/join", {"code": code, "dry_run": True}).status == 200
    assert b.post("/api/fleet/join", {"code": code, "dry_run": True}).status == 200
    node_a_id = a.get("/api/fleet").json["node_id"]
    joined = a.post("/api/fleet/join", {"code": code})   # the dry runs did not use it up
    assert joined.status == 200, joined.body
    used = wait_for(lambda: (r := _listed(fleet, join_id))["used_by"] and r, what="the code marked used")
    assert used["used_by"] == node_a_id and used["used_at"]
    _refused(b, code, "join_code_used")
    _refused(b, code, "join_code_used", dry_run=True)
    assert not os.path.exists(os.path.join(node_b.data_dir, "fleet", "fleet.key"))


def test_a_used_code_stays_used_when_a_bucket_writer_restores_its_sealed_object(fleet, joiners):
    (_, a), (_, b) = joiners
    join_id, code = _mint(fleet)
    bucket = fleet.bucket_client()
    sealed = bucket.get_bytes(f"{PREFIX}joins/{join_id}").body
    assert a.post("/api/fleet/join", {"code": code}).status == 200
    wait_for(lambda: _listed(fleet, join_id)["used_by"], what="the code marked used")
    # the object the code's URL reads is a tombstone now; put the sealed payload back and remove
    # the first joiner's claim: only the primary's signed joins.json still says the code is used
    assert bucket.get_bytes(f"{PREFIX}joins/{join_id}").body != sealed
    bucket.put_object(f"{PREFIX}joins/{join_id}", sealed, "application/octet-stream")
    bucket.delete_object(f"{PREFIX}claims/{join_id}.json")
    _refused(b, code, "join_code_used")


def test_a_revoked_code_is_gone_from_the_list_and_refused(fleet, joiners):
    (_, a), (_, b) = joiners
    join_id, code = _mint(fleet)
    bucket = fleet.bucket_client()
    sealed = bucket.get_bytes(f"{PREFIX}joins/{join_id}").body
    assert fleet.admin.delete(f"/api/fleet/join-codes/{join_id}").status == 204
    assert _listed(fleet, join_id) is None
    _refused(a, code, "join_code_revoked")
    bucket.put_object(f"{PREFIX}joins/{join_id}", sealed, "application/octet-stream")  # restored by a bucket writer
    _refused(b, code, "join_code_revoked")
    again = fleet.admin.delete(f"/api/fleet/join-codes/{join_id}")
    assert again.status == 404 and again.error_code == "not_found"
    assert fleet.admin.delete("/api/fleet/join-codes/0123456789abcdef").status == 404


def test_a_second_joiner_before_the_primary_polls_sees_the_first_claim(fleet, joiners):
    (_, a), (_, b) = joiners
    join_id, code = _mint(fleet)
    fleet.primary.stop()   # the primary cannot mark the code used: the claim alone must refuse
    try:
        assert a.post("/api/fleet/join", {"code": code}).status == 200
        _refused(b, code, "join_code_used")
    finally:
        fleet.primary.start()
    fleet.admin = fleet.site.admin = admin_of(fleet.primary)
    node_a_id = a.get("/api/fleet").json["node_id"]
    wait_for(lambda: _listed(fleet, join_id)["used_by"] == node_a_id, what="the code marked used after the restart")


def test_a_code_can_carry_replica_credentials_instead_of_the_primarys(fleet, joiners):
    """Minted with the read-only identity's keys, the payload carries those: a dry run reads the
    fleet with them, and a join cannot write its claim (that identity may not write at all, and the
    test SeaweedFS has no identity limited to one key), so the node stays standalone, holding none
    of the primary's credentials. One of the two keys alone is refused."""
    (node, a), _ = joiners
    seaweed = fleet.seaweed
    half = fleet.admin.post("/api/fleet/join-codes", {"replica_access_key": seaweed.readonly_access_key})
    assert half.status == 400 and half.json["error"]["field"] == "replica_secret_key", half.body
    minted = fleet.admin.post("/api/fleet/join-codes", {"replica_access_key": seaweed.readonly_access_key,
                                                        "replica_secret_key": seaweed.readonly_secret_key})
    assert minted.status == 201, minted.body
    assert a.post("/api/fleet/join", {"code": minted.json["code"], "dry_run": True}).status == 200
    refused = a.post("/api/fleet/join", {"code": minted.json["code"]})
    assert refused.status == 502 and refused.error_code == "bucket_unreachable", refused.body
    assert "claim" in refused.json["error"]["message"]
    assert a.get("/api/fleet").json["role"] == "standalone"
    assert not os.path.exists(os.path.join(node.data_dir, "fleet", "bucket.json"))
