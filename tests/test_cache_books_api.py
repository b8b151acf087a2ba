"""GET /api/cache with two public workers: the books every process shares, each process's hits
and misses, the last purge (what the panel's Cache page shows)."""

import re

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_public_workers import TwoWorkerNode, wait_until

pytestmark = pytest.mark.daemon_process


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("books")), seaweed, node_class=TwoWorkerNode)
    instance.add_rule("/b", prefix="b/", cache_ttl=3600)
    assert wait_until(lambda: len(re.findall(r"public worker \d+ serving", instance.node.log())) == 2, 20)
    yield instance
    instance.close()


def test_the_books_show_every_process_and_the_last_purge(site):
    for n in range(3):
        site.put(f"b/{n}.txt", b"x" * (1000 + n))
    asked = 0
    for _ in range(4):
        for n in range(3):
            assert site.get(f"/b/{n}.txt").status == 200
            asked += 1
    books = site.admin.get("/api/cache")
    assert books.status == 200, books.body
    body = books.json
    assert body["entries"] == 3 and 3 * 1000 < body["bytes"] <= body["max_bytes"]
    assert body["last_purge"] is None
    workers = [p for p in body["processes"] if p["role"] == "worker"]
    assert sorted(p["slot"] for p in workers) == [1, 2] and all(p["alive"] for p in workers)
    assert [p["slot"] for p in body["processes"] if p["role"] == "daemon"] == [0]
    assert sum(p["hits"] + p["misses"] for p in workers) == asked
    assert sum(p["misses"] for p in workers) >= 3 and sum(p["hits"] for p in workers) >= asked - 6
    for p in workers:
        if p["hits"] + p["misses"]:
            assert p["hit_ratio"] == round(p["hits"] / (p["hits"] + p["misses"]), 4)

    purged = site.admin.post("/api/purge", {"urls": [f"http://{site.host}/b/0.txt"]})
    assert purged.json == {"purged": 1}
    after = site.admin.get("/api/cache").json
    assert after["entries"] == 2 and after["bytes"] < body["bytes"]
    assert after["last_purge"]["purged"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", after["last_purge"]["at"])


def test_the_books_need_routes_read(site):
    assert site.node.client().get("/api/cache").status == 401
