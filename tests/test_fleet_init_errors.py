"""POST /api/fleet/init on a bucket whose server cannot write: SeaweedFS with no free volume
answers a bare 500 InternalError; the node's 502 names that likely cause (real daemon, a
SeaweedFS of this test's own with -volume.max=1)."""

import pytest

from tests.fleet_setup import admin_of
from tests.node import Node
from tests.peers.seaweed import SeaweedS3


@pytest.fixture
def full_seaweed(tmp_path):
    (tmp_path / "weed").mkdir()
    server = SeaweedS3(str(tmp_path / "weed"), extra_args=["-volume.max=1"]).start()
    yield server
    server.close()


def test_init_on_a_bucket_with_no_writable_volume_names_the_cause(full_seaweed, tmp_path):
    full_seaweed.create_bucket("fleet")
    (tmp_path / "node").mkdir()
    node = Node(str(tmp_path / "node")).start()
    try:
        answer = admin_of(node).post("/api/fleet/init", {
            "endpoint": full_seaweed.endpoint, "region": full_seaweed.region, "bucket": "fleet",
            "access_key": full_seaweed.access_key, "secret_key": full_seaweed.secret_key, "path_style": True})
        assert answer.status == 502 and answer.error_code == "bucket_unreachable", answer.body
        message = answer.json["error"]["message"]
        assert "InternalError" in message and "no writable volume" in message and "-volume.max" in message, message
        assert admin_of(node).get("/api/fleet").json["role"] == "standalone"
    finally:
        node.close()
