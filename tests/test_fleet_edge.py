"""The fleet carries a rule's edge controls: a real primary and replicas (SeaweedFS as the fleet and
content bucket, poll 1 s). A rule with access deny, rate_limit, headers and a country list saved on
the primary is enforced on the replicas' public ports, before the content bucket is asked; a
replica without a country database refuses every client of a country-listed rule (fails closed)."""

import http.client
import time

import pytest

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.geo_db import write_country_db
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_metrics_endpoint import sample, scrape


def fetch_from(source, node, host, path):
    conn = http.client.HTTPConnection("127.0.0.1", node.public_port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Host": host})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    """A primary and one replica with the same country database, and a second replica without one."""
    database = write_country_db(tmp_path_factory.mktemp("geo") / "countries.mmdb")

    class GeoNode(FleetNode):
        def __init__(self, workdir, env=None, args=()):
            super().__init__(workdir, env={"CONTENTNODE_GEOIP_DB": database, **(env or {})}, args=args)

    instance = Fleet(tmp_path_factory, seaweed, replicas=1, node_class=GeoNode)
    plain = FleetNode(str(tmp_path_factory.mktemp("plain-replica"))).start()
    instance.replicas.append(plain)
    instance.replica_admins.append(admin_of(plain))
    instance.join(instance.replica_admins[-1])
    yield instance
    instance.close()


def test_access_deny_rate_limit_and_headers_saved_on_the_primary_hold_on_a_replica(fleet):
    before = fleet.seq()
    fleet.site.add_rule("/edge", prefix="edge/", access={"deny": ["127.0.0.3/32"]},
                        rate_limit={"rate": 1, "burst": 3}, headers={"X-Edge": "fleet"})
    for n in range(8):
        fleet.site.put(f"edge/{n}.txt", b"edge", "text/plain")
    fleet.wait_synced(after=before)
    for replica in fleet.replicas:
        status, _, body = fetch_from("127.0.0.3", replica, fleet.site.host, "/edge/0.txt")
        assert status == 403 and b'"forbidden_address"' in body
    assert fleet.site.origin_gets("edge/0.txt") == 0          # the refused address never reached the bucket
    replica = fleet.replicas[0]
    started = time.monotonic()
    answers = [fetch_from("127.0.0.2", replica, fleet.site.host, f"/edge/{n}.txt") for n in range(1, 7)]
    elapsed = time.monotonic() - started
    passed = [a for a in answers if a[0] == 200]
    assert 3 <= len(passed) <= 3 + int(elapsed) and len(passed) < 6, (len(passed), elapsed)
    assert all(a[1]["x-edge"] == "fleet" for a in passed)
    limited = [a for a in answers if a[0] == 429]
    assert limited and all(int(a[1]["retry-after"]) >= 1 for a in limited)
    gets = sum(fleet.site.origin_gets(f"edge/{n}.txt") for n in range(1, 7))
    assert gets == len(passed)                                 # 429s never reached the bucket either
    counted = sample(scrape(replica), "contentnode_public_refusals_total", reason="rate_limited")
    assert counted == len(limited)
    assert sample(scrape(replica), "contentnode_public_refusals_total", reason="forbidden_address") == 1


def test_a_country_list_holds_on_a_replica_with_a_database_and_fails_closed_without(fleet):
    before = fleet.seq()
    fleet.site.add_rule("/geo", prefix="geo/", access={"countries": {"deny": ["FR"]}})
    fleet.site.put("geo/a.txt", b"geo", "text/plain")
    fleet.wait_synced(after=before)
    with_db, without_db = fleet.replicas
    assert fetch_from("127.0.0.2", with_db, fleet.site.host, "/geo/a.txt")[0] == 200   # DE
    assert fetch_from("127.0.0.3", with_db, fleet.site.host, "/geo/a.txt")[0] == 403   # FR
    assert fetch_from("127.0.0.2", without_db, fleet.site.host, "/geo/a.txt")[0] == 403
    assert fetch_from("127.0.0.1", without_db, fleet.site.host, "/geo/a.txt")[0] == 403
    listing = fleet.replica_admins[1].get("/api/rules").json
    assert listing["country_database"]["available"] is False
    assert wait_for(lambda: fleet.site.origin_gets("geo/a.txt") == 1, 5, what="one bucket GET")
