"""Rollback at join (issue 32): after the primary published a newer bundle, a bucket writer puts an
older one back; a node joining with a code minted after the newer one refuses it (the join payload
carries the primary's seq and bundle hash), dry run or not. Real daemons, SeaweedFS."""

import json
import time

import pytest

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

BUNDLE = "contentnode/bundle.json"


@pytest.fixture
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=0, host="rollback.example.test")
    yield instance
    instance.close()


def test_a_joiner_refuses_a_bundle_older_than_its_code(fleet, tmp_path):
    client = fleet.bucket_client()
    older = client.get_bytes(BUNDLE).body
    before = fleet.seq()
    fleet.site.add_rule("/newer/", prefix="site/")
    wait_for(lambda: fleet.seq() > before, 15, what="the primary publishing the newer bundle")
    code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
    fleet.primary.kill()   # idle or gone: nobody writes the newer bundle again
    client.put_object(BUNDLE, older, "application/json")
    joiner = FleetNode(str(tmp_path)).start()
    try:
        admin = admin_of(joiner)
        for dry_run in (True, False):
            answer = admin.post("/api/fleet/join", {"code": code, "dry_run": dry_run})
            assert answer.status == 400 and answer.json["error"]["code"] == "older_seq", answer.body
        assert admin.get("/api/fleet").json["role"] == "standalone"
    finally:
        joiner.close()


def test_an_idle_primary_writes_over_a_bundle_put_back_by_a_bucket_writer(fleet):
    client = fleet.bucket_client()
    older = client.get_bytes(BUNDLE).body
    before = fleet.seq()
    fleet.site.add_rule("/newer/", prefix="site/")
    newer = wait_for(lambda: fleet.seq() > before and fleet.seq(), 15, what="the primary publishing the newer bundle")
    time.sleep(2)   # idle now: nothing shared changes from here on
    client.put_object(BUNDLE, older, "application/json")
    # poll 1 s: the primary's next conditional GET finds another object and publishes over it
    wait_for(lambda: json.loads(client.get_bytes(BUNDLE).body)["seq"] > newer, 5,
             what="the idle primary republishing over the older bundle")
    # the bundle is written to the bucket before the primary's own state moves: both get there
    wait_for(lambda: fleet.seq() > newer, 5, what="the primary's own seq past the older bundle's")
