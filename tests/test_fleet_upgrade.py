"""A fleet upgraded to member lists with real daemons of the previous build (docs/API.md, Fleet:
Upgrading a fleet to member lists): a primary and two replicas start on the last commit of main
before member lists (taken with `git archive`, as tests/boot_packages.py takes its previous
version), then each node's code is replaced with this checkout's over the same data dir.
SeaweedFS as the bucket, polls of 1 s."""

import os

import pytest

from contentnode.fleet import bundle, keys, members
from tests import previous_build
from tests.fleet_setup import Fleet, FleetNode, admin_of, opens_sealed, wait_for
from tests.node import ROOT
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

# The last commit of main before fleet members (the merge that brought them is its child).
PREVIOUS = "a4394fa"


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory):
    """The previous build's contentnode package as plain files (truly before member lists)."""
    return previous_build.previous_tree(tmp_path_factory, PREVIOUS, os.path.join("fleet", "members.py"))


def _upgrade(node, admin=None):
    """Replace the node's code with this checkout's; the same data dir. Its admin client again."""
    node.stop()
    node.root = ROOT
    node.start()
    return admin_of(node) if admin is None else admin


def _view(client) -> dict:
    return client.get("/api/fleet").json


def test_the_primary_upgraded_over_replicas_of_the_previous_build(tmp_path_factory, seaweed,  # noqa: F811
                                                                   previous_tree):
    class PreviousNode(FleetNode):
        def __init__(self, workdir, env=None, args=()):
            super().__init__(workdir, env=env, args=args)
            self.root = previous_tree

    fleet = Fleet(tmp_path_factory, seaweed, replicas=2, host="upgrade.example.test", node_class=PreviousNode)
    try:
        first, second = fleet.replica_admins
        before = fleet.seq()
        fleet.site.add_rule("/", prefix="site/")
        fleet.site.put("site/a.txt", b"before", "text/plain")
        fleet.wait_synced(after=before)
        assert "members" not in fleet.member_bundle()["parts"]      # the previous build's bundle
        assert "added member" not in fleet.primary.log()

        # replicas first (the documented order): the first one upgraded applies the older
        # primary's next bundle with the fleet key it holds, and that primary keeps listing it
        first = _upgrade(fleet.replicas[0])
        fleet.replica_admins[0] = first
        first_id = _view(first)["node_id"]
        seq = fleet.seq()
        assert fleet.admin.post("/api/buckets", fleet.seaweed.bucket_definition(fleet.site.bucket,
                                                                                name="under the older primary")).status == 201
        fleet.wait_synced(after=seq)
        wait_for(lambda: first_id in [r["node_id"] for r in _view(fleet.admin)["nodes"]], 20,
                 what="the older primary listing the upgraded replica")

        # then the primary, same data dir: it lists itself, seals under the fleet key
        admin = _upgrade(fleet.primary)
        fleet.admin = fleet.site.admin = admin
        seq = fleet.seq()
        made = admin.post("/api/buckets", fleet.seaweed.bucket_definition(fleet.site.bucket, name="after the upgrade"))
        assert made.status == 201, made.body
        wait_for(lambda: fleet.seq() > seq, what="the upgraded primary publishing")
        part = fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]
        assert part["sealing_id"] == members.LEGACY
        # the upgraded replica: adopted from its MAC'd status with its member keys, and applying
        wait_for(lambda: first_id in fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]["members"], 20,
                 what="the upgraded primary adopting the upgraded replica")
        wait_for(lambda: _view(first)["seq"] == fleet.seq() and _view(first)["last_error"] is None, 20,
                 what="the upgraded replica applying the upgraded primary's bundles")
        assert "after the upgrade" in open(os.path.join(fleet.replicas[0].data_dir, "state.json")).read()
        assert fleet.served(fleet.replicas[0], "/a.txt").body == b"before"
        # the replica left on the previous build: listed (its MAC'd status), but it refuses a
        # bundle with a members part and keeps serving what it applied last (why replicas go first)
        second_id = _view(second)["node_id"]
        refused = wait_for(lambda: (v := _view(second))["last_error"] and v, 20,
                           what="the previous build's replica refusing the members part")
        assert refused["last_error"]["code"] == "malformed" and refused["seq"] < fleet.seq()
        assert fleet.served(fleet.replicas[1], "/a.txt").body == b"before"
        wait_for(lambda: second_id in [r["node_id"] for r in _view(admin)["nodes"]], 20,
                 what="the upgraded primary listing the previous build's replica from its MAC'd status")

        # that replica upgraded too: it opens the fleet-key sealing and is adopted
        second = _upgrade(fleet.replicas[1])
        fleet.replica_admins[1] = second
        wait_for(lambda: second_id in fleet.member_bundle()["parts"][bundle.MEMBERS]["data"]["members"], 20,
                 what="the upgraded primary adopting the second replica")
        wait_for(lambda: fleet.synced(), 20, what="both replicas at the primary's seq")
        assert _view(admin)["members"] == 3

        # rotate-key: the fleet key opens nothing more; members work as in a fleet made by this build
        fleet_key = keys.load(fleet.replicas[1].data_dir).fleet_key
        assert fleet_key is not None
        seq = fleet.seq()
        assert admin.post("/api/fleet/rotate-key", {}).status == 200
        wait_for(lambda: fleet.seq() > seq, what="the primary publishing under a new sealing key")
        after = fleet.member_bundle()
        assert after["parts"][bundle.MEMBERS]["data"]["sealing_id"] != members.LEGACY
        assert not opens_sealed(after, fleet_key)
        seq = fleet.seq()
        fleet.site.put("site/b.txt", b"after", "text/plain")
        assert admin.post("/api/buckets", fleet.seaweed.bucket_definition(fleet.site.bucket,
                                                                          name="after rotate-key")).status == 201
        fleet.wait_synced(20, after=seq)
        for node, client in zip(fleet.replicas, fleet.replica_admins):
            view = _view(client)
            assert view["last_error"] is None and view["removed"] is None
            assert "after rotate-key" in open(os.path.join(node.data_dir, "state.json")).read()
            assert fleet.served(node, "/b.txt").body == b"after"
        listed = {r["node_id"] for r in _view(admin)["nodes"]}
        assert {first_id, second_id} <= listed and _view(admin)["unknown_statuses"] == 0
    finally:
        fleet.close()
