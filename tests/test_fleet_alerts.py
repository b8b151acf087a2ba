"""Fleet alerts: what the primary derives from the nodes' statuses (unit), and end to end a
replica that still serves a certificate the primary has replaced (one notification naming
it) and the primary's /metrics gauges (real daemons, SeaweedFS)."""

import datetime
import os
import time

import pytest

from contentnode.clock import rfc3339
from contentnode.fleet import alerts
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

NOW = 1_800_000_000.0
DAY = 86400


def _row(**fields):
    row = {"node_id": "a" * 16, "name": "edge-2", "seq": 7, "lag": 0, "unseen": False, "last_error": None,
           "poll_seconds": 1, "seen_at": rfc3339(NOW), "certificates": {}}
    row.update(fields)
    return row


def _domains(**not_after):
    return {host: {"certificate": {"not_after": rfc3339(when)}} for host, when in not_after.items()}


def test_behind_only_after_three_polls_and_only_while_seen():
    published = rfc3339(NOW - 10)
    rows = [_row(lag=1), _row(lag=0), _row(lag=2, unseen=True)]
    alerts.annotate(rows, {}, published, 1, NOW)
    assert [r["behind"] for r in rows] == [True, False, False]
    assert alerts.problems(rows[0]) == {"behind"} and alerts.problems(rows[2]) == {"unseen"}
    assert "1 behind" in alerts.detail(rows[0], "behind")
    fresh = [_row(lag=1)]
    alerts.annotate(fresh, {}, rfc3339(NOW - 2), 1, NOW)  # published two polls ago: not yet
    assert fresh[0]["behind"] is False
    slow = [_row(lag=1, poll_seconds=10)]
    alerts.annotate(slow, {}, published, 1, NOW)  # a node polling every 10 s gets 30 s
    assert slow[0]["behind"] is False


def test_a_certificate_is_reported_only_when_it_differs_from_the_primarys():
    soon, later = NOW + 5 * DAY, NOW + 80 * DAY
    stale = _row(certificates={"a.test": rfc3339(soon), "b.test": rfc3339(soon), "c.test": rfc3339(later),
                               "../x": "garbage"})
    alerts.annotate([stale], _domains(**{"a.test": later, "b.test": soon}), None, 1, NOW)
    # a.test: the primary renewed it, the node did not; b.test: the same certificate everywhere
    # (the primary's own cert_expiring covers it); c.test: not within 14 days
    assert stale["expiring_certificates"] == ["a.test"]
    assert alerts.problems(stale) == {"cert_expiring"}
    assert "a.test" in alerts.detail(stale, "cert_expiring")


def test_certificates_due_is_small_and_soonest_first():
    domains = _domains(**{f"h{i}.test": NOW + i * 3600 for i in range(300)}, far=NOW + 60 * DAY)
    due = alerts.certificates_due(domains, NOW)
    assert len(due) == alerts.CERTIFICATES_REPORTED and "h0.test" in due and "far" not in due
    assert list(due)[:2] == ["h0.test", "h1.test"]


class _SlowReplica(FleetNode):
    """The primary polls every second; a replica made by this class every 30 s, so it keeps
    serving what it applied at its join while the primary moves on."""

    def __init__(self, workdir, env=None, args=()):
        slow = {"CONTENTNODE_FLEET_POLL_SECONDS": "30"} if "replica" in os.path.basename(workdir) else {}
        super().__init__(workdir, env={**slow, **(env or {})}, args=args)


@pytest.fixture
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=0, host="alerts.example.test", node_class=_SlowReplica)
    yield instance
    instance.close()


def _upload(fleet, days):
    ca, ca_key = make_ca()
    now = time.time()
    cert, key = make_leaf([fleet.site.host], issuer=ca, issuer_key=ca_key,
                          not_after=datetime.datetime.fromtimestamp(now + days * DAY, datetime.UTC))
    response = fleet.admin.post("/api/certs/upload", {"host": fleet.site.host, "cert_pem": cert_pem(cert),
                                                      "key_pem": key_pem(key)})
    assert response.status == 200, response.body
    return response.json["fingerprint"]


def test_a_replica_still_serving_a_replaced_certificate_is_one_notification(fleet, tmp_path_factory):
    before = fleet.seq()
    expiring = _upload(fleet, 5)
    # the replica's first look is at its join, the next 30 s later: join once the bundle holds the certificate
    wait_for(lambda: fleet.seq() > before, what="the primary publishing the certificate")
    node = _SlowReplica(str(tmp_path_factory.mktemp("replica"))).start()
    fleet.replicas.append(node)
    admin = admin_of(node)
    fleet.replica_admins.append(admin)
    fleet.join(admin)
    wait_for(lambda: (admin.get(f"/api/domains/{fleet.site.host}").json.get("certificate") or {})
             .get("fingerprint") == expiring, what="the replica applying the expiring certificate")
    node_id = admin.get("/api/fleet").json["node_id"]

    # primary gauges: one node seen; a replica's /metrics carries no fleet sample
    # (a joiner's first status may predate its first apply: the primary lists it before, see Members)
    metrics = wait_for(lambda: (m := fleet.admin.get("/metrics").body.decode()) and
                       "contentnode_fleet_nodes_seen 1" in m and "contentnode_fleet_max_lag 0" in m and m,
                       what="the primary seeing the replica at its seq")
    assert "contentnode_fleet_bundle_age_seconds " in metrics
    replica_metrics = admin.get("/metrics").body.decode()
    assert "# TYPE contentnode_fleet_nodes_seen gauge" in replica_metrics
    assert "\ncontentnode_fleet_nodes_seen " not in replica_metrics

    _upload(fleet, 80)  # the primary replaces it; the replica polls again only in 30 s
    line = wait_for(lambda: next((x for x in fleet.primary.log().splitlines()
                                  if "event fleet_node_problem" in x and "cert_expiring" in x), None),
                    timeout=20, what="the primary's cert_expiring notification")
    assert node_id in line and fleet.site.host in line
    wait_for(lambda: "contentnode_fleet_max_lag 1" in fleet.admin.get("/metrics").body.decode(),
             what="the lag gauge")
    time.sleep(4)  # more status reads: still one notification for this incident
    log = fleet.primary.log()
    assert sum(1 for x in log.splitlines() if "event fleet_node_problem" in x and "cert_expiring" in x) == 1
