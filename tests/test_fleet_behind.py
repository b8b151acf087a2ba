"""The primary's `behind` alert end to end: a replica that stays at an old seq while it
keeps reporting (it refuses a bundle it cannot apply) is shown behind on the primary's
Fleet view and notified once, named (docs/API.md, "Fleet"). Poll 1 s: three polls."""

import os
import time

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


def test_a_replica_stuck_at_an_old_seq_is_shown_behind_and_notified_once(tmp_path_factory, seaweed):  # noqa: F811
    sites = str(tmp_path_factory.mktemp("sites"))

    class SitesNode(FleetNode):
        poll_env = {**FleetNode.poll_env, "CONTENTNODE_FOLDER_ROOTS": sites}

    fleet = Fleet(tmp_path_factory, seaweed, replicas=0, node_class=SitesNode)
    stuck = FleetNode(str(tmp_path_factory.mktemp("stuck")),
                      env={"CONTENTNODE_FOLDER_ROOTS": str(tmp_path_factory.mktemp("elsewhere"))}).start()
    try:
        client = admin_of(stuck)
        fleet.join(client)
        wait_for(lambda: fleet.synced([client]), what="the replica at the primary's seq")
        stuck_id = client.get("/api/fleet").json["node_id"]

        def row():
            return next((n for n in fleet.admin.get("/api/fleet").json["nodes"] if n["node_id"] == stuck_id), None)

        wait_for(lambda: (r := row()) and r["lag"] == 0 and not r["unseen"], what="the replica seen and current")
        assert row()["behind"] is False
        logged = len(fleet.primary.log())

        os.makedirs(os.path.join(sites, "web"))
        before = fleet.seq()
        created = fleet.admin.post("/api/buckets", {"name": "web", "type": "folder", "path": os.path.join(sites, "web")})
        assert created.status == 201, created.body
        wait_for(lambda: fleet.seq() > before, what="the primary publishing the folder bucket")
        behind = wait_for(lambda: (r := row()) and r["behind"] and r, 20, what="the replica shown behind")
        assert behind["lag"] >= 1 and behind["unseen"] is False
        assert behind["seq"] == before   # it kept its last configuration
        assert client.get("/api/fleet").json["seq"] == before

        def notified():
            return [x for x in fleet.primary.log()[logged:].splitlines()
                    if "event fleet_node_problem" in x and stuck_id in x and f"{stuck_id}: behind" in x]

        wait_for(notified, 10, what="the behind notification")
        time.sleep(4)   # four more polls, still behind: one notification per incident
        assert len(notified()) == 1, notified()
        assert row()["behind"] is True
    finally:
        stuck.close()
        fleet.close()
