"""Rules API against the real daemon (buckets on a real SeaweedFS)."""

import uuid

import pytest

from tests.content_setup import Site
from tests.inprocess import node_class

pytestmark = pytest.mark.in_process  # HTTP to the App and SeaweedFS; the test without Pillow runs a daemon process

DOMAIN = "www.example.test"

# a node started without geoip_db (the tests' venv has the maxminddb package)
NO_COUNTRIES = {"available": False, "missing": "the geoip_db start-up value"}


@pytest.fixture
def setup(admin, seaweed):
    """An admin client with one domain and one bucket; returns (client, bucket id)."""
    assert admin.post("/api/domains", {"host": DOMAIN}).status == 201
    bucket = admin.post("/api/buckets", seaweed.bucket_definition("rules-bucket"))
    assert bucket.status == 201, bucket.body
    return admin, bucket.json["id"]


def test_create_with_defaults_and_read_back(setup):
    admin, bucket = setup
    answer = admin.post("/api/rules", {"domain": "WWW.Example.TEST.", "path": "/static//v1/", "bucket": bucket})
    assert answer.status == 201, answer.body
    rule = answer.json
    assert {k: rule[k] for k in ("domain", "path", "bucket", "prefix", "cache_ttl", "signed", "images",
                                 "enabled")} == {
        "domain": DOMAIN, "path": "/static/v1", "bucket": bucket, "prefix": "", "cache_ttl": 3600,
        "signed": False, "images": False, "enabled": True}
    # on an S3 bucket the cache members keep today's meaning: a fixed TTL, no query, GET and HEAD
    assert {k: rule[k] for k in ("cache_mode", "query", "methods", "max_body", "stale_while_revalidate",
                                 "stale_if_error")} == {
        "cache_mode": "override", "query": "ignore", "methods": "read", "max_body": 10 << 20,
        "stale_while_revalidate": 0, "stale_if_error": 0}
    assert rule["created_at"].endswith("Z") and len(rule["id"]) == 12
    assert admin.get(f"/api/rules/{rule['id']}").json == rule
    assert admin.get("/api/rules").json == {"rules": [rule], "country_database": NO_COUNTRIES}
    assert admin.get("/api/panel").json["rules"] == [rule]


def test_all_fields_and_domain_filter(setup):
    admin, bucket = setup
    assert admin.post("/api/domains", {"host": "other.example.test"}).status == 201
    full = {"domain": DOMAIN, "path": "/img", "bucket": bucket, "prefix": "images/", "cache_ttl": 0,
            "signed": True, "images": True, "enabled": False}
    first = admin.post("/api/rules", full)
    assert first.status == 201 and {k: first.json[k] for k in full} == full
    second = admin.post("/api/rules", dict(full, domain="other.example.test", cache_ttl=31536000))
    assert second.status == 201
    assert [r["id"] for r in admin.get("/api/rules?domain=other.example.test").json["rules"]] == [second.json["id"]]
    assert len(admin.get("/api/rules").json["rules"]) == 2
    assert admin.get("/api/rules?domain=bad..name").status == 400


@pytest.mark.parametrize("change,field", [
    ({"domain": "unknown.example.test"}, "domain"), ({"domain": "not a host"}, "domain"), ({"domain": None}, "domain"),
    ({"bucket": "000000000000"}, "bucket"), ({"bucket": 5}, "bucket"),
    ({"path": "static"}, "path"), ({"path": "/a/../b"}, "path"), ({"path": "/a?b"}, "path"), ({"path": 3}, "path"),
    ({"prefix": "/abs"}, "prefix"), ({"prefix": 1}, "prefix"),
    ({"cache_ttl": -1}, "cache_ttl"), ({"cache_ttl": 31536001}, "cache_ttl"), ({"cache_ttl": "60"}, "cache_ttl"),
    ({"cache_ttl": True}, "cache_ttl"), ({"signed": "yes"}, "signed"), ({"images": 1}, "images"),
    ({"enabled": None}, "enabled"), ({"weight": 2}, "weight"),
    ({"cache_mode": "vary"}, "cache_mode"), ({"cache_mode": None}, "cache_mode"), ({"query": "all"}, "query"),
    ({"query": {"only": []}}, "query"), ({"query": {"only": ["a&b"]}}, "query"), ({"query": ["a"]}, "query"),
    ({"methods": "GET"}, "methods"), ({"max_body": -1}, "max_body"), ({"max_body": (1 << 30) + 1}, "max_body"),
    ({"stale_while_revalidate": 31536001}, "stale_while_revalidate"), ({"stale_if_error": "5"}, "stale_if_error")])
def test_invalid_rules_are_refused_and_change_nothing(setup, change, field):
    admin, bucket = setup
    body = dict({"domain": DOMAIN, "path": "/x", "bucket": bucket}, **change)
    answer = admin.post("/api/rules", body)
    assert answer.status == 400 and answer.error_code == "invalid", answer.body
    assert answer.json["error"]["field"] == field
    assert admin.get("/api/rules").json == {"rules": [], "country_database": NO_COUNTRIES}


def test_cache_members_are_stored_and_updated(setup):
    admin, bucket = setup
    body = {"domain": DOMAIN, "path": "/app", "bucket": bucket, "cache_mode": "origin",
            "query": {"only": ["v", "page", "v"]}, "methods": "all", "max_body": 1024,
            "stale_while_revalidate": 30, "stale_if_error": 600}
    rule = admin.post("/api/rules", body)
    assert rule.status == 201, rule.body
    assert rule.json["query"] == {"only": ["page", "v"]}          # names unique and sorted
    assert {k: rule.json[k] for k in ("cache_mode", "methods", "max_body", "stale_while_revalidate",
                                      "stale_if_error")} == {
        "cache_mode": "origin", "methods": "all", "max_body": 1024, "stale_while_revalidate": 30,
        "stale_if_error": 600}
    path = f"/api/rules/{rule.json['id']}"
    updated = admin.put(path, {"query": "include", "cache_mode": "override"})
    assert updated.status == 200, updated.body
    assert updated.json["query"] == "include" and updated.json["cache_mode"] == "override"
    assert updated.json["stale_if_error"] == 600


def test_missing_fields_are_named(setup):
    admin, bucket = setup
    for missing in ("domain", "path", "bucket"):
        body = {"domain": DOMAIN, "path": "/x", "bucket": bucket}
        del body[missing]
        assert admin.post("/api/rules", body).json["error"]["field"] == missing


def test_paths_are_unique_per_domain_after_normalisation(setup):
    admin, bucket = setup
    assert admin.post("/api/rules", {"domain": DOMAIN, "path": "/img", "bucket": bucket}).status == 201
    clash = admin.post("/api/rules", {"domain": DOMAIN, "path": "/img/", "bucket": bucket})
    assert clash.status == 409 and clash.error_code == "conflict" and clash.json["error"]["field"] == "path"
    assert admin.post("/api/domains", {"host": "b.example.test"}).status == 201
    assert admin.post("/api/rules", {"domain": "b.example.test", "path": "/img", "bucket": bucket}).status == 201


def test_partial_update_of_signed_and_images(setup):
    admin, bucket = setup
    rule = admin.post("/api/rules", {"domain": DOMAIN, "path": "/v", "bucket": bucket, "prefix": "v/"}).json
    updated = admin.put(f"/api/rules/{rule['id']}", {"signed": True, "images": True})
    assert updated.status == 200
    assert updated.json == dict(rule, signed=True, images=True, updated_at=updated.json["updated_at"],
                                revision=updated.json["revision"])
    assert updated.json["revision"] > rule["revision"]
    moved = admin.put(f"/api/rules/{rule['id']}", {"path": "/video/", "cache_ttl": 60})
    assert (moved.json["path"], moved.json["cache_ttl"], moved.json["signed"]) == ("/video", 60, True)
    assert admin.get(f"/api/rules/{rule['id']}").json == moved.json


def test_bad_updates_change_nothing(setup):
    admin, bucket = setup
    a = admin.post("/api/rules", {"domain": DOMAIN, "path": "/a", "bucket": bucket}).json
    b = admin.post("/api/rules", {"domain": DOMAIN, "path": "/b", "bucket": bucket}).json
    assert admin.put(f"/api/rules/{b['id']}", {"path": "/a/"}).status == 409
    assert admin.put(f"/api/rules/{b['id']}", {"bucket": "000000000000", "signed": True}).status == 400
    assert admin.put(f"/api/rules/{b['id']}", {"cache_ttl": 99999999}).status == 400
    assert admin.put(f"/api/rules/{b['id']}", {"domain": "nope.example.test"}).status == 400
    assert admin.put(f"/api/rules/{b['id']}", [1]).status == 400
    assert admin.get(f"/api/rules/{b['id']}").json == b and admin.get(f"/api/rules/{a['id']}").json == a
    assert admin.put("/api/rules/000000000000", {"signed": True}).status == 404


def test_delete(setup):
    admin, bucket = setup
    rule = admin.post("/api/rules", {"domain": DOMAIN, "path": "/", "bucket": bucket}).json
    assert admin.delete(f"/api/domains/{DOMAIN}").error_code == "in_use"
    assert admin.delete(f"/api/rules/{rule['id']}").status == 204
    assert admin.get(f"/api/rules/{rule['id']}").status == 404
    assert admin.delete(f"/api/rules/{rule['id']}").status == 404
    assert admin.delete(f"/api/domains/{DOMAIN}").status == 204


def test_rules_need_a_session(node):
    assert node.client().get("/api/rules").status == 401
    assert node.client().post("/api/rules", {"path": "/"}).error_code == "unauthenticated"


def test_longest_rule_wins_on_the_public_port(request, tmp_path, seaweed):
    site = Site(str(tmp_path), seaweed, host=f"lp-{uuid.uuid4().hex[:6]}.example.test",
                node_class=node_class(request))
    try:
        site.put("root/page.txt", b"from root")
        site.put("assets/page.txt", b"from assets")
        site.put("big/page.txt", b"from big")
        site.add_rule("/", prefix="root/")
        site.add_rule("/assets", prefix="assets/")
        big = site.add_rule("/assets/big", prefix="big/")
        assert site.get("/page.txt").body == b"from root"
        assert site.get("/assets/page.txt").body == b"from assets"
        assert site.get("/assets/big/page.txt").body == b"from big"
        assert site.get("/assetsX/page.txt").status == 404  # the root rule maps it to root/assetsX/page.txt
        assert site.admin.put(f"/api/rules/{big}", {"enabled": False}).status == 200
        assert site.get("/assets/big/page.txt").status == 404  # a disabled rule never falls back
    finally:
        site.close()


def test_images_need_the_pillow_extra(tmp_path, seaweed):
    """On a node where Pillow cannot be imported, enabling images is a 400 naming the extra."""
    blocker = tmp_path / "no-pillow" / "PIL"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("Pillow hidden for this test")\n')
    from tests.node import ROOT, Node
    node = Node(str(tmp_path), env={"PYTHONPATH": f"{blocker.parent}:{ROOT}"}).start()
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": "admin", "password": "correct horse battery staple"}).status == 201
        assert admin.post("/api/domains", {"host": DOMAIN}).status == 201
        bucket = admin.post("/api/buckets", seaweed.bucket_definition("rules-bucket")).json["id"]
        refused = admin.post("/api/rules", {"domain": DOMAIN, "path": "/img", "bucket": bucket, "images": True})
        assert refused.status == 400 and refused.json["error"]["field"] == "images"
        assert "contentnode[images]" in refused.json["error"]["message"]
        assert admin.get("/api/rules").json == {"rules": [], "country_database": NO_COUNTRIES}
        plain = admin.post("/api/rules", {"domain": DOMAIN, "path": "/img", "bucket": bucket})
        assert plain.status == 201
        assert admin.put(f"/api/rules/{plain.json['id']}", {"images": True}).status == 400
    finally:
        node.kill()
