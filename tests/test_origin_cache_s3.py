"""An S3 rule in cache_mode "origin": the object's own Cache-Control metadata decides, as an HTTP
origin's answer would (SeaweedFS, objects written through its S3 API with that metadata). An object
stored with max-age=1 is a hit within its second and revalidated after it (S3 answers 304: no body
moves); one stored with no-store is never kept; a missing key is a 404 not stored."""


import pytest

from contentnode.core import netguard, s3, s3_records
from tests.content_setup import Site
from tests.inprocess import node_class
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

pytestmark = pytest.mark.in_process


@pytest.fixture
def site(tmp_path, seaweed, request):  # noqa: F811
    instance = Site(str(tmp_path), seaweed, node_class=node_class(request))
    yield instance
    instance.close()


def _writer(site) -> s3.S3Client:
    d = site.seaweed.bucket_definition(site.bucket)
    config = s3_records.BucketConfig(d["endpoint"], d["region"], d["bucket"], d["access_key"], d["secret_key"], True)
    return s3.S3Client(config, netguard.OutboundPolicy(), timeout=5)


def test_an_objects_cache_control_decides_on_an_s3_rule_in_origin_mode(site):
    writer = _writer(site)
    writer.put_object("short.txt", b"one second", "text/plain", {"cache-control": "max-age=1"})
    writer.put_object("never.txt", b"not kept", "text/plain", {"cache-control": "no-store"})
    site.add_rule("/o", cache_mode="origin", cache_ttl=600)

    miss = site.get("/o/short.txt")
    assert miss.status == 200 and miss.body == b"one second"
    assert miss.headers["cache-control"] == "max-age=1"   # the object's own metadata, not the rule's TTL
    assert miss.headers["cache-status"].startswith("contentnode; fwd=uri-miss; fwd-status=200; stored")
    hit = site.get("/o/short.txt")
    assert hit.body == b"one second" and hit.headers["cache-status"].startswith("contentnode; hit")
    assert site.origin_gets("short.txt") == 1
    probe = site.admin.post("/api/probe", {"url": f"http://{site.host}/o/short.txt"}).json["cache"]
    assert (probe["mode"], probe["freshness"], probe["lifetime"], probe["etag"]) == ("origin", "max-age", 1, miss.headers["etag"])

    site.node.set_clock_offset(1.2)   # past max-age=1 on the clock the cache reads
    revalidated = site.get("/o/short.txt")
    assert revalidated.status == 200 and revalidated.body == b"one second"
    assert revalidated.headers["cache-status"].startswith("contentnode; fwd=stale; fwd-status=304; stored")
    assert site.origin_gets("short.txt") == 2

    for _ in range(2):
        answer = site.get("/o/never.txt")
        assert answer.status == 200 and answer.body == b"not kept"
        assert "stored" not in answer.headers["cache-status"] and 'detail="no-store"' in answer.headers["cache-status"]
    assert site.origin_gets("never.txt") == 2
    assert site.admin.post("/api/probe", {"url": f"http://{site.host}/o/never.txt"}).json["cache"]["cached"] is False

    missing = site.get("/o/nothing.txt")
    assert missing.status == 404 and "stored" not in missing.headers["cache-status"]


def test_an_s3_rule_in_override_mode_keeps_its_fixed_ttl(site):
    _writer(site).put_object("short.txt", b"one second", "text/plain", {"cache-control": "max-age=1"})
    site.add_rule("/f", cache_ttl=600)
    site.get("/f/short.txt")
    site.node.set_clock_offset(1.2)   # past max-age=1 on the clock the cache reads
    again = site.get("/f/short.txt")
    assert again.headers["x-cache"] == "HIT" and again.headers["cache-control"] == "public, max-age=600"
    assert "cache-status" not in again.headers and site.origin_gets("short.txt") == 1
