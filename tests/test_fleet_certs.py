"""Certificates in a fleet: uploaded on the primary, served by a replica's HTTPS listener
without a restart, and never in the bucket in clear (real daemons, SeaweedFS, poll 1 s)."""

import pytest

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.fleet_setup import Fleet, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.tlsclient import fetch_over_tls


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=1, host="certs.example.test")
    instance.wait_synced()
    yield instance
    instance.close()


def _upload(fleet, ca, ca_key):
    cert, key = make_leaf([fleet.site.host], issuer=ca, issuer_key=ca_key)
    response = fleet.admin.post("/api/certs/upload", {"host": fleet.site.host, "cert_pem": cert_pem(cert),
                                                      "key_pem": key_pem(key)})
    assert response.status == 200, response.body
    return response.json["fingerprint"], key_pem(key)


def _served(port, host, ca):
    try:
        return fetch_over_tls(port, host, "/.well-known/service/check?nonce=" + "n" * 24, cadata=cert_pem(ca))
    except (OSError, ValueError):
        return None, b""


def test_a_certificate_uploaded_on_the_primary_is_served_by_the_replica(fleet):
    ca, ca_key = make_ca()
    replica_admin = fleet.replica_admins[0]
    https = replica_admin.put("/api/https", {"enabled": True, "port": 0})  # a node-local listener
    assert https.status == 200, https.body
    port = https.json["listening_port"]

    first, first_key = _upload(fleet, ca, ca_key)
    fingerprint, answer = wait_for(lambda: (got := _served(port, fleet.site.host, ca))[0] == first and got,
                                   what="the replica serving the uploaded certificate")
    assert answer.startswith(b"HTTP/1.1 200") and b'"proof"' in answer
    # the files are written just before the records: the summary follows in the same apply
    wait_for(lambda: (replica_admin.get(f"/api/domains/{fleet.site.host}").json["certificate"] or {})
             .get("fingerprint") == first, what="the replica's domain record")

    # a replacement reaches the same listener, no restart
    second, second_key = _upload(fleet, ca, ca_key)
    assert second != first
    wait_for(lambda: _served(port, fleet.site.host, ca)[0] == second, what="the replacement served")
    assert replica_admin.get("/api/https").json["listening_port"] == port

    # the replica may not change the fleet's certificates itself
    cert, key = make_leaf([fleet.site.host], issuer=ca, issuer_key=ca_key)
    refused = replica_admin.post("/api/certs/upload", {"host": fleet.site.host, "cert_pem": cert_pem(cert),
                                                       "key_pem": key_pem(key)})
    assert refused.status == 409 and refused.error_code == "managed_by_fleet"

    # keys travel sealed: no private key in the bucket in clear
    for key, data in fleet.bucket_objects().items():
        for secret in (first_key, second_key):
            assert secret.encode() not in data, key
        assert b"PRIVATE KEY" not in data, key
