"""ACME in a fleet: the primary orders from a real pebble under its issuer lease, and the
CA's HTTP-01 request goes to a REPLICA, which answers it from the bucket; the certificate
then reaches the replica's HTTPS listener through the bundle (real daemons, SeaweedFS)."""

import pytest

from tests.fleet_setup import Fleet, FleetNode, admin_of, wait_for
from tests.peers.pebble import Pebble
from tests.peers.s3_stub import S3Stub
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.tlsclient import fetch_over_tls

HOST = "shop.fleet.example.test"


@pytest.fixture
def acme_fleet(tmp_path_factory, seaweed):  # noqa: F811
    pebble = Pebble(str(tmp_path_factory.mktemp("pebble")))
    env = {"SSL_CERT_FILE": pebble.ca_file, "CONTENTNODE_DNS_RESOLVER": pebble.dns.dns_address}

    class AcmeNode(FleetNode):
        def __init__(self, workdir, env_=None, args=()):
            super().__init__(workdir, env={**env, **(env_ or {})}, args=args)

    fleet = None
    try:
        fleet = Fleet(tmp_path_factory, seaweed, replicas=1, host=HOST, node_class=AcmeNode)
        pebble.start(fleet.replicas[0].public_port)  # the CA validates on the replica, never the primary
        before = fleet.seq()
        assert fleet.admin.put("/api/settings", {"acme_directory": pebble.directory_url,
                                                 "acme_email": "ops@example.com"}).status == 200
        fleet.wait_synced(after=before)
        yield fleet, pebble
    finally:
        if fleet is not None:
            fleet.close()
        pebble.stop()


def test_issued_on_the_primary_validated_on_a_replica(acme_fleet):
    fleet, pebble = acme_fleet
    assert fleet.admin.get("/api/fleet").json["issuer"] == "lease"
    issued = fleet.admin.post("/api/certs/issue", {"host": HOST})
    assert issued.status == 200, (issued.body, pebble.log()[-2000:])
    assert issued.json["source"] == "acme" and "Pebble" in issued.json["issuer"]
    replica_log = fleet.replicas[0].log()
    assert "/.well-known/acme-challenge/" in replica_log  # the CA asked the replica
    assert "/.well-known/acme-challenge/" not in fleet.primary.log()

    # nothing of the order is left in the bucket: answers removed, lease released
    left = [k for k in fleet.bucket_objects() if "/acme-challenges/" in k or "/leases/" in k]
    assert left == []

    # the certificate reaches the replica's HTTPS listener through the bundle
    port = fleet.replica_admins[0].put("/api/https", {"enabled": True, "port": 0}).json["listening_port"]
    root = pebble.issuing_root_pem()

    def served():
        try:
            return fetch_over_tls(port, HOST, cadata=root)[0]
        except (OSError, ValueError):
            return None

    wait_for(lambda: served() == issued.json["fingerprint"], what="the replica serving the issued certificate")
    # the files are written just before the records: the summary follows in the same apply
    wait_for(lambda: (fleet.replica_admins[0].get(f"/api/domains/{HOST}").json["certificate"] or {})
             .get("fingerprint") == issued.json["fingerprint"], what="the replica's domain record")


def test_a_bucket_that_ignores_conditions_leaves_the_primary_the_only_issuer(tmp_path):
    """The fallback: the probe finds the bucket ignores conditional writes, says so once, and
    the primary orders without a lease (its answers still go to the bucket for the others)."""
    stub = S3Stub(honour_conditions=False)
    pebble = Pebble(str(tmp_path))
    (tmp_path / "node").mkdir()
    node = None
    try:
        node = FleetNode(str(tmp_path / "node"), env={"SSL_CERT_FILE": pebble.ca_file,
                                                      "CONTENTNODE_DNS_RESOLVER": pebble.dns.dns_address}).start()
        pebble.start(node.public_port)
        admin = admin_of(node)
        init = admin.post("/api/fleet/init", stub.bucket_definition("fleet"))
        assert init.status == 200, init.body
        assert init.json["probe"]["conditional_writes"] is False and init.json["issuer"] == "primary_only"
        assert "ignores the condition" in init.json["probe"]["checks"][0]["detail"]
        again = admin.post("/api/fleet/probe", {})
        assert again.status == 200 and again.json["conditional_writes"] is False
        assert node.log().count("event fleet_probe_failed") == 1  # one notification per incident

        assert admin.put("/api/settings", {"acme_directory": pebble.directory_url}).status == 200
        assert admin.post("/api/domains", {"host": HOST}).status == 201
        issued = admin.post("/api/certs/issue", {"host": HOST})
        assert issued.status == 200, issued.body
        written = [path for method, path in stub.log if method == "PUT"]
        assert not any("/leases/" in p for p in written)
        assert any("/acme-challenges/" in p for p in written)
    finally:
        if node is not None:
            node.kill()
        pebble.stop()
        stub.close()
