"""A served path follows every configuration change at once (the content path remembers
resolved targets per state document), and large hits keep every rule of the content path."""

import os

import pytest

from tests.content_setup import Site
from tests.inprocess import node_class
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

pytestmark = pytest.mark.in_process


@pytest.fixture
def site(tmp_path, seaweed, request):  # noqa: F811
    instance = Site(str(tmp_path), seaweed, node_class=node_class(request))
    yield instance
    instance.close()


def test_rule_changes_apply_to_the_next_request(site):
    site.put("a/x.txt", b"x" * 10, "text/plain")
    site.put("b/x.txt", b"y" * 20, "text/plain")
    rule = site.add_rule("/pub", prefix="a/", cache_ttl=600)
    for _ in range(2):
        hit = site.get("/pub/x.txt")
        assert hit.status == 200 and hit.body == b"x" * 10
    assert hit.headers["cache-control"] == "public, max-age=600" and hit.headers["x-cache"] == "HIT"

    assert site.admin.put(f"/api/rules/{rule}", {"signed": True}).status == 200
    refused = site.get("/pub/x.txt")
    assert refused.status == 403 and refused.error_code == "signature_required"

    assert site.admin.put(f"/api/rules/{rule}", {"signed": False, "prefix": "b/", "cache_ttl": 0}).status == 200
    cached = site.get("/pub/x.txt")              # the cache holds URLs: the old copy until a purge
    assert cached.body == b"x" * 10 and cached.headers["cache-control"] == "no-cache"
    assert site.admin.post("/api/purge", {"urls": [f"http://{site.host}/pub/x.txt"]}).status == 200
    moved = site.get("/pub/x.txt")
    assert moved.status == 200 and moved.body == b"y" * 20 and moved.headers["x-cache"] == "MISS"

    assert site.admin.put(f"/api/rules/{rule}", {"enabled": False}).status == 200
    assert site.get("/pub/x.txt").status == 404

    assert site.admin.put(f"/api/rules/{rule}", {"enabled": True}).status == 200
    assert site.get("/pub/x.txt").status == 200
    assert site.admin.delete(f"/api/rules/{rule}").status == 204
    assert site.get("/pub/x.txt").status == 404


def test_a_large_hit_keeps_ranges_conditionals_head_and_purge(site):
    body = os.urandom(300 * 1024)                 # above the in-memory size: sent from the entry's file
    site.put("big/f.bin", body)
    site.add_rule("/big", prefix="big/", cache_ttl=600)
    assert site.get("/big/f.bin").body == body    # the miss fills the cache
    for _ in range(3):
        hit = site.get("/big/f.bin")
        assert hit.status == 200 and hit.body == body and hit.headers["x-cache"] == "HIT"
    part = site.get("/big/f.bin", headers={"Range": "bytes=1000-1999"})
    assert part.status == 206 and part.body == body[1000:2000]
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(body)}"
    assert site.get("/big/f.bin", headers={"Range": f"bytes={len(body)}-"}).status == 416
    assert site.get("/big/f.bin", headers={"If-None-Match": hit.headers["etag"]}).status == 304
    head = site.get("/big/f.bin", method="HEAD")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(len(body))

    new = os.urandom(300 * 1024)
    site.put("big/f.bin", new)
    assert site.get("/big/f.bin").body == body    # still the cached copy
    purge = site.admin.post("/api/purge", {"urls": [f"http://{site.host}/big/f.bin"]})
    assert purge.status == 200, purge.body
    assert site.get("/big/f.bin").body == new
    again = site.get("/big/f.bin")
    assert again.headers["x-cache"] == "HIT" and again.body == new
