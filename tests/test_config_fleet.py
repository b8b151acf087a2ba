"""Configuration as code in a real fleet (docs/API.md, "Configuration as code" and "Fleet"): a replica
refuses POST /api/config/apply as it refuses every shared write and nothing changes on it; an apply on
the primary reaches the replica through the signed bundle."""

import os
import subprocess
import sys

from tests.fleet_setup import serving_fleet_fixture, wait_for
from tests.node import ADMIN_PASSWORD, ADMIN_USER, ROOT
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

fleet = serving_fleet_fixture(replicas=1)
SECTIONS = ("domains", "buckets", "rules", "settings", "notifications", "policy")


def _wanted(document: dict, host: str) -> dict:
    """The document with a new domain served by a new rule on the fleet's bucket, and a shared setting changed."""
    rule = next(r for r in document["rules"] if r["path"] == "/")
    document["domains"]["config.example.test"] = {}
    document["rules"].append({**rule, "domain": "config.example.test", "path": "/"})
    document["settings"]["link_grace_seconds"] = 1234
    document["buckets"] = {name: {k: v for k, v in bucket.items() if k != "secret_key_set"}
                           for name, bucket in document["buckets"].items()}   # the node keeps its secret
    return document


def test_a_replica_refuses_apply_and_the_primary_reaches_it_through_the_bundle(fleet, tmp_path):
    replica, node = fleet.replica_admins[0], fleet.replicas[0]
    primary_id = fleet.admin.get("/api/fleet").json["node_id"]
    before = fleet.state(node)
    document = _wanted(replica.get("/api/config").json["document"], fleet.site.host)
    for dry_run in (False, True):
        refused = replica.post("/api/config/apply", {"document": document, "dry_run": dry_run})
        assert refused.status == 409 and refused.error_code == "managed_by_fleet", refused.body
        assert primary_id in refused.json["error"]["message"]
    path = tmp_path / "node.toml"
    path.write_text('[domains."cli.example.test"]\n')
    cli = subprocess.run([sys.executable, "-m", "contentnode", "config", "apply", str(path), "--url",
                          f"http://127.0.0.1:{node.admin_port}", "--user", ADMIN_USER], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_PASSWORD=ADMIN_PASSWORD))
    assert cli.returncode == 1 and "409" in cli.stderr and "nothing changed" in cli.stderr, cli.stderr
    after = fleet.state(node)
    for section in SECTIONS:
        assert after.get(section) == before.get(section), section   # nothing changed on the replica
    assert after["revisions"]["config"] == before["revisions"]["config"]   # (the login moved the user's revision)

    own_name = replica.get("/api/settings").json["node_name"]
    seq = fleet.seq()
    revision = fleet.admin.get("/api/config").json["revision"]
    applied = fleet.admin.post("/api/config/apply", {"document": _wanted(fleet.admin.get("/api/config").json["document"],
                                                                          fleet.site.host)},
                               headers={"If-Match": f'"{revision}"'})
    assert applied.status == 200, applied.body
    assert applied.json["changes"]["domains"]["created"] == 1 and applied.json["changes"]["settings"]["changed"] == 1
    fleet.wait_synced(after=seq)
    hosts = [d["host"] for d in replica.get("/api/domains").json["domains"]]
    assert "config.example.test" in hosts
    assert replica.get("/api/settings").json["link_grace_seconds"] == 1234   # a fleet-shared setting
    assert replica.get("/api/settings").json["node_name"] == own_name        # a node's own setting is its own
    served = wait_for(lambda: (r := fleet.served(node, "/hello.txt", host="config.example.test")).status == 200 and r,
                      what="the applied rule served by the replica")
    assert served.body == b"hello"
