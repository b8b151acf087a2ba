"""A folder bucket in a fleet: the bundle carries its path, and each node serves that folder
from its own disk when the path lies in its own folder_roots (docs/API.md, "Fleet"); a node
whose roots do not hold it refuses the whole bundle and keeps serving what it had."""

import os

import pytest

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sites"))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed, sites):  # noqa: F811
    class SameRootsNode(FleetNode):
        poll_env = {**FleetNode.poll_env, "CONTENTNODE_FOLDER_ROOTS": sites}

    instance = Fleet(tmp_path_factory, seaweed, replicas=1, node_class=SameRootsNode)
    yield instance
    instance.close()


def test_a_folder_bucket_on_the_primary_serves_from_each_nodes_own_folder(fleet, sites):
    web = os.path.join(sites, "web")
    os.makedirs(web)
    with open(os.path.join(web, "page.txt"), "wb") as f:
        f.write(b"from the shared folder layout")
    before = fleet.seq()
    created = fleet.admin.post("/api/buckets", {"name": "web", "type": "folder", "path": web})
    assert created.status == 201, created.body
    rule = fleet.admin.post("/api/rules", {"domain": fleet.site.host, "path": "/web",
                                           "bucket": created.json["id"]})
    assert rule.status == 201, rule.body
    fleet.wait_synced(after=before)
    [replica] = fleet.replicas
    answer = wait_for(lambda: (r := fleet.served(replica, "/web/page.txt")).status == 200 and r,
                      what="the replica serving the folder")
    assert answer.body == b"from the shared folder layout"
    assert replica.client("public").get("/healthz").json == {"status": "ok"}
    assert fleet.replica_admins[0].get("/api/fleet").json["last_error"] is None


def test_a_replica_whose_roots_do_not_hold_the_folder_keeps_its_last_configuration(fleet, tmp_path, sites):
    (tmp_path / "other").mkdir()
    outside = FleetNode(str(tmp_path / "other"), env={"CONTENTNODE_FOLDER_ROOTS": str(tmp_path / "elsewhere")})
    outside.start()
    try:
        client = admin_of(outside)
        # a joiner is not a member yet: the buckets are sealed for members only, so its answer cannot
        # say what it will refuse (the primary says it below, from the node's status)
        dry = fleet.join(client, dry_run=True)
        assert dry["cannot_take"] is None and dry["with"]["buckets"] is None and dry["with"]["rules"] >= 1, dry
        assert fleet.join(client)["cannot_take"] is None
        outside_id = client.get("/api/fleet").json["node_id"]
        # the primary knows it at its first status read, with its roots, and names what it refuses
        row = wait_for(lambda: next((r for r in fleet.admin.get("/api/fleet").json["nodes"]
                                     if r["node_id"] == outside_id and r.get("cannot_take")), None),
                       timeout=4, what="the primary listing the new replica and what it cannot take")
        assert row["folder_roots"] == [str(tmp_path / "elsewhere")] and "/web" in row["cannot_take"][0], row
        web = next(b for b in fleet.admin.get("/api/buckets").json["buckets"] if b["name"] == "web")
        before = fleet.seq()
        changed = fleet.admin.put(f"/api/buckets/{web['id']}", {"name": "web2"})
        assert changed.status == 200, changed.body
        [warning] = changed.json["fleet_warnings"]
        assert outside_id in warning and "will refuse" in warning and "folder_roots" in warning, warning
        wait_for(lambda: fleet.seq() > before, what="the renamed bucket published")
        # its first apply carries the folder bucket, outside its roots: refused
        state = wait_for(lambda: ((s := client.get("/api/fleet").json)["last_error"] or {}).get("code")
                         == "restore_checks" and s, what="the refusal reported")
        assert state["seq"] in (None, 0) and "folder_roots" in state["last_error"]["message"], state
        assert outside.client("public").get("/healthz").status == 503   # never applied: not ready
        # restarted with the roots it lacked, it applies the same bundle (nothing new published)
        seq = fleet.seq()
        outside.stop()
        outside.extra_env["CONTENTNODE_FOLDER_ROOTS"] = sites
        outside.start()
        client = admin_of(outside)
        wait_for(lambda: (s := client.get("/api/fleet").json)["seq"] == seq and s["last_error"] is None,
                 what="the bundle applied after the restart with the right roots")
        assert fleet.served(outside, "/web/page.txt").status == 200 and fleet.seq() == seq
    finally:
        outside.close()
