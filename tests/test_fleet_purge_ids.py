"""A promoted primary's purges reach the replicas: its purge history continues from the
highest id the fleet already applied, so a replica that applied the old primary's purges
does not skip the new ones (real daemons, SeaweedFS, poll 1 s)."""

from tests.fleet_setup import serving_fleet, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


def _purge(client, fleet, name: str):
    answer = client.post("/api/purge", {"urls": [f"http://{fleet.site.host}/{name}"]})
    assert answer.status == 200, answer.body


def test_the_first_purges_of_a_promoted_primary_reach_the_replicas(tmp_path_factory, seaweed):  # noqa: F811
    fleet = serving_fleet(tmp_path_factory, seaweed, replicas=2)
    try:
        first, second = fleet.replica_admins
        follower = fleet.replicas[1]
        for index in range(3):  # the old primary's purge ids 1..3, applied by both replicas
            _purge(fleet.admin, fleet, f"old{index}.txt")
        before = fleet.seq()
        fleet.wait_synced(after=before - 1)
        wait_for(lambda: fleet.state(follower)["fleet"].get("last_purge_id") == 3, what="purge id 3 applied")

        fleet.primary.kill()
        promoted = first.post("/api/fleet/promote", {"recovery_secret": fleet.init_answer["recovery_secret"]})
        assert promoted.status == 200, promoted.body
        wait_for(lambda: second.get("/api/fleet").json["key_epoch"] == promoted.json["key_epoch"],
                 what="the other replica following the new primary")

        fleet.site.put("site/p.txt", b"version 1", "text/plain")
        assert fleet.served(follower, "/p.txt").body == b"version 1"
        assert fleet.served(follower, "/p.txt").headers.get("x-cache") == "HIT"
        fleet.site.put("site/p.txt", b"version 2", "text/plain")
        _purge(first, fleet, "p.txt")  # the new primary's first purge
        wait_for(lambda: fleet.served(follower, "/p.txt").body == b"version 2", 10,
                 what="the new primary's first purge replayed on the other replica")
        ids = [i["id"] for i in fleet.state(fleet.replicas[0])["fleet_purges"]["items"]]
        assert ids[-1] == 4 and ids == sorted(set(ids)), ids  # continued, never reused
        assert fleet.state(follower)["fleet"]["last_purge_id"] == 4
    finally:
        fleet.close()
