"""The record tables (core/records.py): the API's bodies, the restore checks and the load's defaults
all come from one declaration per record, so what one accepts the others accept."""

import copy

import pytest

from contentnode.core import buckets, domains, rules
from contentnode.core.backup import BackupError
from contentnode.core.fields import FieldError
from contentnode.restore import check_records

S3 = {"id": "b1", "name": "Media", "type": "s3", "endpoint": "https://s3.example.com", "region": "eu-1",
      "bucket": "media-bucket", "access_key": "AKID", "secret_key": "SECRET", "path_style": False,
      "last_check": None}
DOMAIN = {"host": "a.example", "status": "pending", "last_check": None, "redirect": None, "certificate": None,
          "access": None, "error_pages": None}
RULE = {"id": "r1", "domain": "a.example", "path": "/", "bucket": "b1", **rules.RULE.defaults()}


def _doc(**sections):
    doc = {"domains": {"a.example": dict(DOMAIN)}, "buckets": {"b1": dict(S3)}, "rules": {"r1": dict(RULE)}}
    doc.update(sections)
    return copy.deepcopy(doc)


def test_the_records_as_the_api_stores_them_restore():
    check_records(_doc())


@pytest.mark.parametrize("section,change,words", [
    ("buckets", {"b2": dict(S3, id="b2", name="MEDIA")}, "name is taken by bucket b1"),
    ("buckets", {"b1": dict(S3, path="/srv/x")}, "path is not a field of s3 buckets"),
    ("buckets", {"b1": {k: v for k, v in S3.items() if k != "path_style"}}, "path_style is missing"),
    ("buckets", {"b1": dict(S3, endpoint="https://S3.Example.com/")}, "endpoint is not in its stored form"),
    ("rules", {"r1": {k: v for k, v in RULE.items() if k != "compress"}}, "compress is missing"),
    ("rules", {"r2": dict(RULE, id="r2")}, "rule r2: its path is routed twice"),
    ("rules", {"r1": dict(RULE, cache_ttl=rules.MAX_CACHE_TTL + 1)}, "cache_ttl must be between"),
    ("domains", {"a.example": dict(DOMAIN, status="lost")}, "status must be one of"),
    ("domains", {"a.example": dict(DOMAIN, error_pages={"600": "e.html"})}, "error_pages.600"),
    ("domains", {"a.example": dict(DOMAIN, access={"allow": ["10.1.2.3/8"], "deny": []})},
     "access is not in its stored form"),
    ("rules", {"r1": dict(RULE, cors={"origins": ["https://A.example"], "methods": ["GET"], "headers": [],
                                      "max_age": None})}, "cors is not in its stored form"),
    ("rules", {"r1": dict(RULE, referers={"allow": ["*.example.com"]})}, "referers is not in its stored form"),
    ("domains", {"a.example": dict(DOMAIN, redirect={"to": "https://a.example/", "code": 301, "keep_path": True})},
     "redirect a domain cannot redirect to itself"),
    ("domains", {"a.example": dict(DOMAIN, certificate={"not_after": "soon"})}, "certificate not_after"),
])
def test_a_record_its_table_refuses_is_not_restored(section, change, words):
    doc = _doc()
    doc[section].update(copy.deepcopy(change))
    with pytest.raises(BackupError) as refused:
        check_records(doc)
    assert f"the backup's {section} cannot be restored" in str(refused.value) and words in str(refused.value)


def test_the_api_bodies_come_from_the_tables():
    assert rules.RULE.body(create=True)["required"] == ["domain", "path", "bucket"]
    assert set(rules.RULE.body(create=False)["properties"]) == set(rules.RULE.fields)
    assert domains.DOMAIN.body(create=True)["properties"] == {"host": domains.DOMAIN.fields["host"].shape}
    create = buckets.BUCKET.body(create=True)
    assert "type" in create["properties"] and "last_check" not in create["properties"]
    assert "type" not in buckets.BUCKET.body(create=False)["properties"]
    assert buckets.BUCKET.secrets() == {"secret_key"}
    assert "secret_key" not in buckets.BUCKET.answer()["properties"]


def test_read_stores_what_the_rules_make_of_a_body_and_names_the_first_broken_field():
    stored = rules.RULE.read({"domain": "A.Example.", "path": "//x//", "bucket": " b1 "}, partial=False)
    assert stored == {"domain": "a.example", "path": "/x", "bucket": "b1"}
    with pytest.raises(FieldError) as missing:
        rules.RULE.read({"domain": "a.example"}, partial=False)
    assert missing.value.field == "path"
    assert rules.RULE.read({"signed": True}, partial=True) == {"signed": True}


def test_a_fleet_bundle_carries_the_shared_record_sections_and_never_the_fleet_section():
    from contentnode.core.fleet_section import FLEET
    from contentnode.fleet import shared

    assert {"domains", "buckets", "rules"} <= set(shared.SECTIONS) and "fleet" not in shared.SECTIONS
    assert rules.RULE.shared and domains.DOMAIN.shared and buckets.BUCKET.shared and not FLEET.shared


def test_set_edge_members_restore_and_travel_in_a_fleet_bundle_whole():
    """A backup restore and a replica applying a bundle (fleet/follower.py) run the same checks;
    the domain and rule sections are the fleet's, carried whole with every member."""
    from contentnode.fleet import shared

    domain = dict(DOMAIN, access={"allow": [], "deny": ["192.0.2.0/24"]}, error_pages={"404": "e/404.html"})
    rule = dict(RULE, cors={"origins": ["https://app.example"], "methods": ["GET"], "headers": ["x-token"],
                            "max_age": 600}, referers={"allow": ["*.partner.example"], "empty": False})
    doc = _doc(domains={"a.example": domain}, rules={"r1": rule})
    check_records(doc)
    parts = {**shared.parts_of(doc), "settings": {}}
    out = shared.applied({}, parts)
    assert out["domains"]["a.example"] == domain and out["rules"]["r1"] == rule
    assert domains.DOMAIN.shared and rules.RULE.shared
