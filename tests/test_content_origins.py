"""One origin per bucket (services/delivery.py Origins): misses reuse kept-alive connections.

Before, every miss made a new S3 client and opened a new connection to the
bucket's server; the counting front of SeaweedFS counts the connections the
daemon opens, so a run of misses and probes shows them reused. A changed bucket
record makes a new origin (its old connections are closed) that still serves,
and a kept connection the server dropped while idle is replaced, not an error.
"""

import threading

import pytest

from contentnode.core import netguard, s3, s3_records
from contentnode.core.keepalive import ConnectionPool
from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.peers.stub import LoopbackListener

MISSES = 5


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("origins")), seaweed)
    instance.add_rule("/keep", prefix="keep/", cache_ttl=600)
    yield instance
    instance.close()


def test_misses_reuse_the_buckets_connection(site):
    for i in range(MISSES):
        site.put(f"keep/get/{i}.txt", f"object {i}".encode(), "text/plain")
    before = site.seaweed.connections()
    for i in range(MISSES):
        response = site.get(f"/keep/get/{i}.txt")
        assert response.status == 200 and response.body == f"object {i}".encode()
        assert response.headers["x-cache"] == "MISS"
    opened = site.seaweed.connections() - before
    assert site.seaweed.count("GET", contains=f"/{site.bucket}/keep/get/") == MISSES
    # one connection, or two when a request began before the last fill handed its connection back
    assert 1 <= opened < MISSES


def test_probes_reuse_one_connection(site):
    site.put("keep/probe.txt", b"probed", "text/plain")
    url = f"http://{site.host}/keep/probe.txt"
    site.admin.post("/api/probe", {"url": url})   # a connection is idle in the pool after this
    before = site.seaweed.connections()
    for _ in range(MISSES):
        response = site.admin.post("/api/probe", {"url": url})
        assert response.status == 200 and response.json["origin"]["ok"] is True
        assert response.json["origin"]["size"] == len(b"probed")
    assert site.seaweed.count("HEAD", contains=f"/{site.bucket}/keep/probe.txt") == MISSES + 1
    assert site.seaweed.connections() - before == 0


def test_a_changed_bucket_gets_a_new_origin(site):
    site.put("keep/changed.txt", b"after the change", "text/plain")
    site.put("keep/held.txt", b"held before the change", "text/plain")   # its own: the test passes alone
    site.get("/keep/held.txt")
    assert site.get("/keep/held.txt").headers["x-cache"] == "HIT"
    response = site.admin.put(f"/api/buckets/{site.bucket_id}", {"name": "renamed bucket"})
    assert response.status == 200, response.body
    before = site.seaweed.connections()
    fresh = site.get("/keep/changed.txt")
    assert fresh.status == 200 and fresh.body == b"after the change" and fresh.headers["x-cache"] == "MISS"
    assert site.seaweed.connections() - before == 1   # the new origin's own connection


class _ClosesWhenIdle(LoopbackListener):
    """An S3 stand-in that answers one HEAD per connection, then closes it without saying so
    (as a server does with a connection idle past its timeout)."""

    def __init__(self):
        self.accepted = 0
        self.closed = threading.Semaphore(0)   # released once per connection it closed
        super().__init__()

    def handle(self, conn):
        self.accepted += 1
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
                data += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\n")
        self.closed.release()


def test_a_connection_the_server_closed_while_idle_is_replaced():
    server = _ClosesWhenIdle()
    pool = ConnectionPool()
    try:
        config = s3_records.BucketConfig(f"http://127.0.0.1:{server.port}", "us-east-1", "b", "AK", "SK", path_style=True)
        client = s3.S3Client(config, netguard.OutboundPolicy(), timeout=5, pool=pool)
        assert client.head_object("one").size == 5
        assert server.closed.acquire(timeout=10)   # the kept connection is closed at the server's end
        assert client.head_object("two").size == 5   # no error: once more on a new connection
        assert server.accepted == 2
    finally:
        pool.close()
        server.close()
