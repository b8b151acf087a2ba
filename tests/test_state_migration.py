"""A state file written by the previous schema version: its records lack the fields that have
defaults, and the load fills them in (core/migrations.py) so every reader indexes them directly."""

import json
import os

import pytest

from contentnode.core import migrations, rules
from contentnode.fleet import shared
from contentnode.store import Store
from tests.content_setup import Site
from tests.node import ADMIN_PASSWORD, ADMIN_USER

PAGE = b"<!doctype html><title>t</title>" + b"".join(b"<p>line %d of the page</p>\n" % i for i in range(80))
# version 3's rule members, filled in with an S3 or folder rule's meaning (a fixed TTL, no query, GET/HEAD)
CACHE_MEMBERS = {"cache_mode": "override", "query": "ignore", "methods": "read", "max_body": 10 << 20,
                 "stale_while_revalidate": 0, "stale_if_error": 0}
# version 4's rule members: no edge control, as before they existed
EDGE_MEMBERS = {"access": None, "rate_limit": None, "headers": None}
# version 5's rule members (cors, hotlink protection) and domain members (access, error pages): none set
BROWSER_MEMBERS = {"cors": None, "referers": None}
DOMAIN_EDGE_MEMBERS = {"access": None, "error_pages": None}
SAME = ("content-type", "content-encoding", "content-length", "cache-control", "etag", "vary", "last-modified")


def _as_version_1(path: str) -> dict:
    """Rewrite the state file as the previous version wrote it: schema 1, rules without the
    fields that have a default. Returns the rules as they were."""
    with open(path) as f:
        doc = json.load(f)
    before = json.loads(json.dumps(doc["rules"]))
    doc["schema"] = 1
    for record in doc["rules"].values():
        for name in rules.RULE.defaults():
            del record[name]
    with open(path, "w") as f:
        json.dump(doc, f)
    return before


@pytest.fixture
def site(tmp_path, seaweed):
    instance = Site(str(tmp_path), seaweed)
    yield instance
    instance.close()


def test_a_version_1_state_file_loads_with_the_defaults_and_is_served_the_same(site):
    rule_id = site.add_rule("/s", prefix="")
    site.put("page.html", PAGE, "text/html; charset=utf-8")
    served = site.get("/s/page.html", headers={"Accept-Encoding": "gzip"})
    assert served.status == 200 and served.headers["content-encoding"] == "gzip"
    answered = site.admin.get(f"/api/rules/{rule_id}").json
    site.node.stop()
    path = os.path.join(site.node.data_dir, "state.json")
    stored = _as_version_1(path)
    site.node.start()
    again = site.get("/s/page.html", headers={"Accept-Encoding": "gzip"})
    assert again.status == 200 and again.body == served.body
    assert {h: again.headers.get(h) for h in SAME} == {h: served.headers.get(h) for h in SAME}
    assert site.node.client("public", host=site.host).get("/s/page.html").body == PAGE
    admin = site.node.client()
    assert admin.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    assert admin.get(f"/api/rules/{rule_id}").json == answered
    # the next write stores the filled-in record at the current schema version
    assert admin.put("/api/settings", {"node_name": "migrated"}).status == 200
    with open(path) as f:
        written = json.load(f)
    assert written["schema"] == migrations.SCHEMA_VERSION and written["rules"] == stored


def test_the_store_fills_every_declared_default_of_a_version_1_document(tmp_path):
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": 1, "rules": {"r1": {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b"}}}, f)
    store = Store(str(tmp_path), {"rules": dict})
    store.load()
    assert store.data["schema"] == migrations.SCHEMA_VERSION
    assert store.data["rules"]["r1"] == {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b",
                                         "prefix": "", "cache_ttl": 3600, "signed": False, "images": False,
                                         "compress": True, "enabled": True, **CACHE_MEMBERS,
                                         **EDGE_MEMBERS, **BROWSER_MEMBERS}


def test_a_version_2_rule_gets_the_cache_members_of_version_3_and_keeps_its_meaning(tmp_path):
    record = {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b", "prefix": "", "cache_ttl": 60,
              "signed": False, "images": False, "compress": False, "enabled": True}
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": 2, "rules": {"r1": dict(record)}}, f)
    store = Store(str(tmp_path), {"rules": dict})
    store.load()
    assert store.data["rules"]["r1"] == {**record, **CACHE_MEMBERS, **EDGE_MEMBERS, **BROWSER_MEMBERS}


def test_a_bucket_from_before_types_is_an_s3_bucket_and_a_domain_gets_its_empty_members(tmp_path):
    s3 = {"id": "b1", "name": "old", "endpoint": "https://s3.example", "region": "r", "bucket": "bkt",
          "access_key": "AK", "secret_key": "SK", "path_style": False}
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": 1, "buckets": {"b1": s3}, "domains": {"a.example": {"host": "a.example"}}}, f)
    store = Store(str(tmp_path), {"buckets": dict, "domains": dict})
    store.load()
    assert store.data["buckets"]["b1"] == dict(s3, type="s3", last_check=None)
    assert store.data["domains"]["a.example"] == {"host": "a.example", "status": "pending", "last_check": None,
                                                  "redirect": None, "certificate": None,
                                                  **DOMAIN_EDGE_MEMBERS}


def test_the_fleet_section_of_a_version_1_document_gets_its_role(tmp_path):
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": 1, "fleet": {}}, f)
    store = Store(str(tmp_path), {"fleet": dict})
    store.load()
    assert store.data["fleet"] == {"role": "standalone"}


def test_a_document_at_the_current_version_is_left_as_it_is(tmp_path):
    """Only a migration fills defaults: a current record lacking one is the restore checks' business."""
    record = {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b"}
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": migrations.SCHEMA_VERSION, "rules": {"r1": record}}, f)
    store = Store(str(tmp_path), {"rules": dict})
    store.load()
    assert store.data["rules"]["r1"] == record


def test_a_bundle_from_a_primary_without_the_newer_fields_is_applied_with_their_defaults():
    parts = {"domains": {}, "buckets": {}, "links": {}, "settings": {},
             "rules": {"r1": {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b", "prefix": "p/"}}}
    rule = shared.applied({}, parts)["rules"]["r1"]
    assert rule == {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b", **rules.RULE.defaults(),
                    "prefix": "p/"}
