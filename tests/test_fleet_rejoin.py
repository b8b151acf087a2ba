"""A replica that leaves and joins again, and a bundle refused for a reason of the node's own
that is then fixed: each applies at its next polls, without waiting for the primary to publish
something new (real daemons, SeaweedFS)."""

import time

import pytest

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


class SlowPollNode(FleetNode):
    """Polls every 3 s, so a leave and a join fit between two polls."""

    poll_env = {"CONTENTNODE_FLEET_POLL_SECONDS": "3"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=0, host="rejoin.example.test")
    before = instance.seq()
    instance.site.add_rule("/", prefix="site/")
    instance.site.put("site/a.txt", b"served", "text/plain")
    wait_for(lambda: instance.seq() > before, what="the rule published")
    yield instance
    instance.close()


def _applied(client, seq):
    view = client.get("/api/fleet").json
    return view["seq"] == seq and view["last_error"] is None and view


def test_leave_and_join_again_within_one_poll_applies_the_current_bundle(fleet, tmp_path):
    node = SlowPollNode(str(tmp_path)).start()
    fleet.replicas.append(node)
    client = admin_of(node)
    fleet.join(client)
    # the primary publishes once more when it adds the new member (within a poll of the join)
    wait_for(lambda: _applied(client, fleet.seq()), what="the first join applied")
    code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
    assert client.post("/api/fleet/leave", {}).status == 200
    joined = client.post("/api/fleet/join", {"code": code})
    assert joined.status == 200, joined.body
    # the rejoined node (same node id, new member keys) is listed again and applies the current
    # bundle: its leave's last status, signed with its old keys, does not remove it afterwards
    wait_for(lambda: _applied(client, fleet.seq()), timeout=2 * 3 + 6, what="the bundle applied after the rejoin")
    assert node.client("public").get("/healthz").status == 200
    assert fleet.served(node, "/a.txt").body == b"served"
    time.sleep(4)   # the primary's next reads of the statuses
    view = client.get("/api/fleet").json
    assert view["last_error"] is None and view["removed"] is None and view["seq"] == fleet.seq()


def test_a_rejoin_whose_leave_status_was_overwritten_before_the_primary_read_it(fleet, tmp_path):
    """The primary takes a claim for a listed node's id only after that node's signed leave
    (docs/API.md, Fleet). Here the primary reads nothing between the leave and the rejoin, and the
    rejoined node's first statuses replace its signed "left" one: its claim carries the leave."""
    node = FleetNode(str(tmp_path)).start()
    fleet.replicas.append(node)
    client = admin_of(node)
    fleet.join(client)
    wait_for(lambda: _applied(client, fleet.seq()), what="the first join applied")
    node_id = client.get("/api/fleet").json["node_id"]
    code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
    status_key = f"contentnode/nodes/{node_id}.json"
    with fleet.primary_paused():
        assert client.post("/api/fleet/leave", {}).status == 200
        assert b'"left":true' in fleet.bucket_client().get_bytes(status_key).body
        joined = client.post("/api/fleet/join", {"code": code})
        assert joined.status == 200, joined.body
        wait_for(lambda: b'"left"' not in fleet.bucket_client().get_bytes(status_key).body, 10,
                 what="the rejoined node's status written over its leave")
    wait_for(lambda: _applied(client, fleet.seq()), timeout=20, what="the bundle applied after the rejoin")
    assert fleet.served(node, "/a.txt").body == b"served"
    assert node_id in [row["node_id"] for row in fleet.admin.get("/api/fleet").json["nodes"]]
    assert "names node" not in fleet.primary.log()


def test_a_bundle_refused_before_the_first_administrator_applies_after_setup(fleet, tmp_path):
    node = FleetNode(str(tmp_path)).start()
    fleet.replicas.append(node)
    node.stop()  # a data dir made by the first start, no administrator yet: a node set up by script
    code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
    joined = node.cli("fleet", "join", code)
    assert joined.returncode == 0, joined.stderr
    node.start()
    wait_for(lambda: "no enabled administrator" in node.log(), what="the bundle refused for want of an administrator")
    assert node.client("public").get("/healthz").status == 503
    client = node.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    seq = fleet.seq()
    wait_for(lambda: _applied(client, seq), timeout=3, what="the bundle applied once an administrator exists")
    assert fleet.served(node, "/a.txt").body == b"served"
    assert fleet.seq() == seq  # nothing was published meanwhile


class FourSecondNode(FleetNode):
    poll_env = {"CONTENTNODE_FLEET_POLL_SECONDS": "4"}


def test_a_new_replica_shows_on_the_primary_at_its_next_poll(tmp_path_factory, seaweed):  # noqa: F811
    """The primary reads the statuses at its first poll, before the join: without the valid join
    code counting, its next read comes three polls (12 s) after that (seen: listed after 12 s)."""
    fleet = Fleet(tmp_path_factory, seaweed, replicas=1, host="appears.example.test", node_class=FourSecondNode)
    try:
        joined = time.monotonic()
        node_id = fleet.replica_admins[0].get("/api/fleet").json["node_id"]
        wait_for(lambda: [r for r in fleet.admin.get("/api/fleet").json["nodes"] if r["node_id"] == node_id],
                 timeout=4 + 3, what="the new replica listed on the primary")
        assert time.monotonic() - joined < 4 + 3
    finally:
        fleet.close()


def test_an_offline_command_on_a_data_dir_never_started_says_so(tmp_path):
    node = FleetNode(str(tmp_path))
    refused = node.cli("fleet", "join", "cnj_x")
    assert refused.returncode == 1
    assert "start the daemon once with this data dir" in refused.stderr and "(pass --data-dir)" not in refused.stderr
