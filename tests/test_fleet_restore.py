"""A restore never changes a node's fleet membership (docs/API.md, "A restore never rolls a
credential back"): the role, seq, pinned key chain and purge history are node-local like the
key files beside them, so a primary restoring its own backup keeps publishing above the seq it
had, and a standalone node restoring a primary's backup stays standalone."""


from tests.fleet_setup import FleetNode, admin_of, serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

PASSPHRASE = "a long passphrase for the test"


fleet = serving_fleet_fixture(replicas=1)


def test_a_primary_restoring_its_own_backup_stays_primary_and_publishes_above_its_seq(fleet):
    sealed = fleet.admin.post("/api/backup/export", {"passphrase": PASSPHRASE})
    assert sealed.status == 200, sealed.body
    plain = fleet.admin.post("/api/backup/export", {}).json
    assert "fleet" not in plain["data"] and "fleet_purges" not in plain["data"]   # node-local: in no backup
    before = fleet.seq()
    fleet.site.add_rule("/later", prefix="site/")
    wait_for(lambda: fleet.seq() > before, what="the primary publishing the new rule")
    published = fleet.seq()
    restored = fleet.admin.post("/api/backup/restore", {"backup": sealed.json, "passphrase": PASSPHRASE,
                                                         "restore_credentials": True})
    assert restored.status == 200, restored.body
    view = fleet.admin.get("/api/fleet").json
    assert view["role"] == "primary" and view["seq"] >= published and view["last_error"] is None
    # the restore removed /later: the primary publishes that above its seq, and the replica follows
    wait_for(lambda: fleet.seq() > published, what="the primary publishing the restored configuration")
    fleet.wait_synced()
    assert fleet.served(fleet.replicas[0], "/later/hello.txt").status == 404
    assert fleet.served(fleet.replicas[0], "/hello.txt").status == 200


def test_a_standalone_node_restoring_a_primarys_backup_stays_standalone(fleet, tmp_path):
    sealed = fleet.admin.post("/api/backup/export", {"passphrase": PASSPHRASE})
    (tmp_path / "other").mkdir()
    other = FleetNode(str(tmp_path / "other")).start()
    try:
        client = admin_of(other)
        restored = client.post("/api/backup/restore", {"backup": sealed.json, "passphrase": PASSPHRASE,
                                                        "restore_credentials": True})
        assert restored.status == 200, restored.body
        client = admin_of(other)   # restore_credentials brought the primary's accounts: sign in again
        view = client.get("/api/fleet").json
        assert view["role"] == "standalone" and view["last_error"] is None
        assert client.get("/api/rules").json   # the configuration itself was restored
    finally:
        other.close()
