"""The primary re-signs an unchanged configuration 10 h after its last bundle, before half the
bundle's lifetime (12 h) has passed, so replicas never reach its expiry (docs/API.md, "Fleet").
End to end with the real daemons and bucket: the primary was down, and its last bundle is 9 h, then 11 h old
when it comes back (its state file says when it issued it; the clocks stay real, since
SigV4 and the bucket need them)."""

import json
import os
import time


from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.fleet import publisher
from tests.fleet_setup import serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

HOUR = 3600


fleet = serving_fleet_fixture(replicas=1)


def back_after(fleet, hours: float) -> None:
    """Stop the primary, date its last bundle `hours` back, start it again."""
    fleet.primary.stop()
    path = os.path.join(fleet.primary.data_dir, "state.json")
    with open(path, "rb") as f:
        doc = json.loads(f.read())
    issued = time.time() - hours * HOUR
    doc["fleet"]["issued_at"] = rfc3339(issued)
    doc["fleet"]["expires_at"] = rfc3339(issued + publisher.LIFETIME_SECONDS)
    with open(path, "w") as f:
        json.dump(doc, f)
    fleet.primary.start()


def published_bundle(fleet) -> dict:
    return json.loads(fleet.bucket_objects()[f"/buckets/{fleet.fleet_bucket}/contentnode/bundle.json"])


def test_a_bundle_younger_than_10_hours_is_not_signed_again(fleet):
    seq = fleet.seq()
    back_after(fleet, 9)
    time.sleep(4)   # four polls
    assert fleet.seq() == seq
    assert published_bundle(fleet)["seq"] == seq


def test_a_bundle_10_hours_old_is_signed_again_before_half_its_lifetime_and_followed(fleet):
    seq = fleet.seq()
    back_after(fleet, 11)
    wait_for(lambda: fleet.seq() == seq + 1, 15, what="the primary re-signing")
    found = published_bundle(fleet)
    issued = parse_rfc3339(found["issued_at"])
    assert abs(issued - time.time()) < 60
    assert parse_rfc3339(found["expires_at"]) - issued == publisher.LIFETIME_SECONDS
    fleet.wait_synced()
    assert fleet.served(fleet.replicas[0], "/hello.txt").body == b"hello"
