"""A fleet of real daemons: one primary, two replicas, SeaweedFS as the bucket, poll 1 s."""

import base64
import json
import os
import time


from tests.fleet_setup import serving_fleet_fixture, wait_for
from tests.inprocess import InProcessNode
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


fleet = serving_fleet_fixture(body=b"hello from the bucket")


def test_a_change_on_the_primary_is_served_by_both_replicas(fleet):
    for node in fleet.replicas:
        assert fleet.served(node, "/hello.txt").body == b"hello from the bucket"
    before = fleet.seq()
    fleet.site.add_rule("/new", prefix="other/")
    fleet.site.put("other/x.txt", b"a new rule", "text/plain")
    fleet.wait_synced(after=before)
    for node in fleet.replicas:
        response = wait_for(lambda n=node: (r := fleet.served(n, "/new/x.txt")).status == 200 and r,
                            what="the new rule served")
        assert response.body == b"a new rule"


def test_replica_refuses_shared_writes_naming_the_primary(fleet):
    primary_id = fleet.admin.get("/api/fleet").json["node_id"]
    replica = fleet.replica_admins[0]
    rule_id = next(iter(replica.get("/api/rules").json["rules"]))["id"]
    before = fleet.state(fleet.replicas[0])
    writes = [("POST", "/api/domains", {"host": "other.example.test"}),
              ("DELETE", f"/api/domains/{fleet.site.host}", None),
              ("POST", "/api/rules", {"domain": fleet.site.host, "path": "/x", "bucket": "b"}),
              ("DELETE", f"/api/rules/{rule_id}", None),
              ("POST", "/api/buckets", fleet.seaweed.bucket_definition("zzz")),
              ("POST", "/api/links/rotate", {}),
              ("PUT", "/api/settings", {"link_grace_seconds": 60})]
    # named by its name and address (its own status, read by the replica each poll), with its id
    assert fleet.admin.put("/api/settings", {"node_name": "edge-0"}).status == 200
    admin_port = fleet.primary.admin_port
    wait_for(lambda: replica.get("/api/fleet").json["primary"]["name"] == "edge-0", what="the primary's name")
    assert replica.get("/api/fleet").json["primary"]["address"].endswith(f":{admin_port}")
    for method, path, body in writes:
        response = replica.request(method, path, body)
        assert response.status == 409, (method, path, response.body)
        message = response.json["error"]["message"]
        assert response.error_code == "managed_by_fleet" and primary_id in message
        assert "edge-0 at " in message and f":{admin_port} (node {primary_id})" in message, message
    assert replica.get("/api/fleet/role").json["primary"].startswith("edge-0 at ")
    after = fleet.state(fleet.replicas[0])
    for section in ("domains", "rules", "buckets", "links", "settings"):
        assert after[section] == before[section]
    # node-local settings, reads and its own cache still work
    assert replica.put("/api/settings", {"node_name": "edge-1"}).status == 200
    assert replica.get("/api/domains").status == 200
    assert replica.post("/api/purge", {"all": True}).status == 200


def test_join_dry_run_says_what_it_replaces_and_changes_nothing(fleet, tmp_path):
    from tests.fleet_setup import FleetNode, admin_of

    node = InProcessNode(str(tmp_path), env=FleetNode.poll_env).start()   # it only speaks HTTP
    try:
        client = admin_of(node)
        assert client.post("/api/domains", {"host": "mine.example.test"}).status == 201
        answer = fleet.join(client, dry_run=True)
        assert answer["dry_run"] is True and answer["role"] == "standalone"
        assert answer["replaces"]["domains"] == 1 and answer["with"]["domains"] == 1
        assert answer["with"]["rules"] >= 1 and answer["replaces"]["rules"] == 0
        assert client.get("/api/fleet").json["role"] == "standalone"
        assert "mine.example.test" in fleet.state(node)["domains"]
    finally:
        node.close()


def test_join_refuses_a_damaged_or_expired_code(fleet, tmp_path):
    from tests.fleet_setup import FleetNode, admin_of

    node = InProcessNode(str(tmp_path), env=FleetNode.poll_env).start()   # it only speaks HTTP
    try:
        client = admin_of(node)
        code = fleet.admin.post("/api/fleet/join-codes", {"expires_in": 60}).json["code"]
        damaged = client.post("/api/fleet/join", {"code": code[:-6] + "AAAAAA"})
        assert damaged.status == 400 and damaged.json["error"]["field"] == "code"
        node.set_clock_offset(2 * 3600)  # the joining node's clock is past the code's expires_at
        try:
            client = admin_of(node)  # the session ended with the clock's jump
            expired = client.post("/api/fleet/join", {"code": code})
        finally:
            node.set_clock_offset(0)
        assert expired.status == 403 and expired.error_code == "join_code_expired", expired.body
        client = admin_of(node)
        assert client.get("/api/fleet").json["role"] == "standalone"
        assert not os.path.exists(os.path.join(node.data_dir, "fleet", "fleet.key"))
    finally:
        node.close()


def test_the_primary_deletes_join_objects_once_they_expire(fleet):
    code = fleet.admin.post("/api/fleet/join-codes", {"expires_in": 60}).json["code"]
    join_id = json.loads(base64.urlsafe_b64decode(code[4:] + "=" * (-len(code[4:]) % 4)))["id"]
    assert any(p.endswith(f"/joins/{join_id}") for p in fleet.bucket_objects())
    fleet.primary.set_clock_offset(600)  # past the 60 s, inside the bucket's 15 min clock tolerance
    try:
        wait_for(lambda: not any(p.endswith(f"/joins/{join_id}") for p in fleet.bucket_objects()), 10,
                 what="the expired join object deleted")
    finally:
        fleet.primary.set_clock_offset(0)
    assert any("/joins/" in p for p in fleet.bucket_objects())  # the codes still valid stay


def test_primary_lists_the_replicas_with_lag_and_health(fleet):
    replica_ids = sorted(c.get("/api/fleet").json["node_id"] for c in fleet.replica_admins)
    fleet.wait_synced()

    def listed():
        nodes = fleet.admin.get("/api/fleet").json["nodes"]
        return nodes if [n["node_id"] for n in nodes] == replica_ids and all(
            n["lag"] == 0 and not n["unseen"] for n in nodes) else None

    nodes = wait_for(listed, 10, what="both replicas listed, current and seen")
    for row in nodes:
        assert row["role"] == "replica" and row["health"]["ready"] is True and row["version_skew"] is False
        assert row["last_error"] is None and "requests" in row["traffic"]
    view = fleet.replica_admins[0].get("/api/fleet").json
    assert view["role"] == "replica" and view["primary"]["node_id"] == fleet.admin.get("/api/fleet").json["node_id"]
    assert view["bucket"]["bucket"] == fleet.fleet_bucket and "secret_key" not in view["bucket"]


def test_a_link_signed_on_any_node_validates_on_every_node(fleet):
    before = fleet.seq()
    fleet.site.add_rule("/private", prefix="secret/", signed=True)
    fleet.site.put("secret/doc.txt", b"signed content", "text/plain")
    fleet.wait_synced(after=before)
    from tests.test_links_api import local

    url = f"http://{fleet.site.host}/private/doc.txt"
    from_primary = fleet.admin.post("/api/links", {"url": url, "expires_in": 600}).json["url"]
    from_replica = fleet.replica_admins[1].post("/api/links", {"url": url, "expires_in": 600}).json["url"]
    for node in [fleet.primary, *fleet.replicas]:
        assert fleet.served(node, "/private/doc.txt").status == 403
        for link in (from_primary, from_replica):
            assert fleet.served(node, local(link)).body == b"signed content"


def test_a_purge_on_the_primary_reaches_the_replicas_caches_within_two_polls(fleet):
    fleet.site.put("site/purge.txt", b"version 1", "text/plain")
    for node in fleet.replicas:
        assert fleet.served(node, "/purge.txt").body == b"version 1"
        assert fleet.served(node, "/purge.txt").headers.get("x-cache") == "HIT"
    fleet.site.put("site/purge.txt", b"version 2", "text/plain")
    assert fleet.served(fleet.replicas[0], "/purge.txt").body == b"version 1"  # cached
    assert fleet.admin.post("/api/purge", {"urls": [f"http://{fleet.site.host}/purge.txt"]}).status == 200
    for node in fleet.replicas:
        wait_for(lambda n=node: fleet.served(n, "/purge.txt").body == b"version 2", 2 * 1 + 0.3 + 1.5,
                 what="the purge replayed on the replica")


def test_no_secret_is_in_the_bucket_in_clear(fleet):
    objects = fleet.bucket_objects()
    assert any(path.endswith("/bundle.json") for path in objects)
    assert any("/nodes/" in path for path in objects)
    state = fleet.state(fleet.primary)
    secrets = [fleet.seaweed.secret_key, fleet.seaweed.access_key, fleet.init_answer["recovery_secret"],
               fleet.init_answer["recovery_secret"][4:]]
    secrets += [key["secret"] for key in state["links"]["keys"].values()]
    with open(f"{fleet.primary.data_dir}/fleet/sealing.key") as f:   # the key the sealed parts are under
        secrets.append(json.loads(f.read())["key"])
    for node in [fleet.primary, *fleet.replicas]:   # every member's private keys
        with open(f"{node.data_dir}/fleet/member.key") as f:
            secrets += json.loads(f.read()).values()
    with open(f"{fleet.primary.data_dir}/fleet/signing.key") as f:
        secrets.append(f.read().strip())
    for path, data in objects.items():
        for secret in secrets:
            assert secret.encode() not in data, f"a secret in clear in {path}"
    for node in [fleet.primary, *fleet.replicas]:
        text = open(f"{node.data_dir}/state.json").read()
        assert fleet.seaweed.secret_key in text  # the content bucket's own record keeps it (node-local file)
        assert fleet.init_answer["recovery_secret"] not in text


def test_command_line_status_and_an_offline_join_from_stdin(fleet, tmp_path):
    from tests.fleet_setup import FleetNode, admin_of

    shown = fleet.replicas[0].cli("fleet", "status")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["role"] == "replica" and status["fleet_id"] == fleet.init_answer["fleet_id"]
    assert "secret_key" not in shown.stdout and fleet.seaweed.secret_key not in shown.stdout

    node = FleetNode(str(tmp_path)).start()
    try:
        admin_of(node)
        node.stop()
        code = fleet.admin.post("/api/fleet/join-codes", {}).json["code"]
        bad = node.cli("fleet", "join", input_text="cnj_garbage\n")
        assert bad.returncode == 1 and "bad_join_code" in bad.stderr
        joined = node.cli("fleet", "join", input_text=code + "\n")
        assert joined.returncode == 0, joined.stderr
        assert json.loads(joined.stdout)["fleet_id"] == fleet.init_answer["fleet_id"]
        node.start()
        wait_for(lambda: fleet.served(node, "/hello.txt").status == 200, 10, what="the offline-joined node serving")
        assert admin_of(node).get("/api/fleet").json["role"] == "replica"
    finally:
        node.close()


def test_fleet_changes_are_audited_without_secrets(fleet):
    entries = fleet.admin.get("/api/audit").json["entries"]
    actions = {e["action"] for e in entries}
    assert {"fleet.init", "fleet.join_code"} <= actions
    text = json.dumps(entries)
    assert fleet.seaweed.secret_key not in text and "cnj_" not in text and "cnr_" not in text
    replica_entries = fleet.replica_admins[0].get("/api/audit").json["entries"]
    assert any(e["action"] == "fleet.join" and e["ok"] for e in replica_entries)


def test_a_dead_replica_is_shown_unseen_and_notified_once_and_blocks_no_one(fleet):
    """Last in this module: it kills a replica."""
    dead_id = fleet.replica_admins[1].get("/api/fleet").json["node_id"]
    live_id = fleet.replica_admins[0].get("/api/fleet").json["node_id"]
    fleet.replicas[1].kill()
    logged = len(fleet.primary.log())

    def unseen():
        rows = {n["node_id"]: n for n in fleet.admin.get("/api/fleet").json["nodes"]}
        return rows.get(dead_id, {}).get("unseen") and rows

    rows = wait_for(unseen, 15, what="the dead replica shown unseen")
    assert not rows[live_id]["unseen"]
    fleet.site.add_rule("/after-death", prefix="site/")
    wait_for(lambda: fleet.synced(fleet.replica_admins[:1]), 10, what="the live replica following on")
    time.sleep(3)
    told = [x for x in fleet.primary.log()[logged:].splitlines() if "event fleet_node_problem" in x and dead_id in x]
    assert len(told) == 1 and "unseen" in told[0], told
