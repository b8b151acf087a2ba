"""The client contract (docs/API.md, "Conventions") against the real daemon: unknown query
parameters, unknown domains in delivery tools, and the records a conflict names."""

import pytest

from contentnode.api import ROUTES

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed

BUCKET = {"name": "origin", "endpoint": "http://127.0.0.1:9", "region": "us-east-1", "bucket": "origin-bucket",
          "access_key": "AKIDEXAMPLE", "secret_key": "secret-example-key", "path_style": True}


def test_unknown_query_parameters_are_refused_everywhere(admin):
    assert admin.post("/api/domains", {"host": "a.example.test"}).status == 201
    typo = admin.get("/api/rules?domian=a.example.test")
    assert typo.status == 400 and typo.error_code == "invalid" and typo.json["error"]["field"] == "domian"
    assert admin.get("/api/rules?domain=a.example.test").status == 200
    for path in ("/api/users?x=1", "/api/settings?verbose=", "/api/panel?_=1", "/api/domains?host=a"):
        answer = admin.get(path)
        assert answer.status == 400 and answer.json["error"]["field"] in ("x", "verbose", "_", "host"), path
    refused = admin.post("/api/domains?dry_run=1", {"host": "b.example.test"})
    assert refused.status == 400 and refused.json["error"]["field"] == "dry_run"
    assert admin.get("/api/domains/b.example.test").status == 404  # nothing changed
    metrics = admin.get("/api/metrics?range=1h&domain=a.example.test&step=5")
    assert metrics.status == 400 and metrics.json["error"]["field"] == "step"


def test_only_declared_parameters_are_read():
    """Every route's declared query names are plain strings; most routes take none."""
    with_query = {(r.method, r.pattern): sorted(r.query) for r in ROUTES if r.query}
    assert with_query == {("GET", "/api/audit"): ["action", "cursor", "limit", "since", "until", "user"],
                          ("GET", "/api/rules"): ["domain"], ("GET", "/api/metrics"): ["domain", "range"],
                          ("GET", "/api/traffic/top"): ["by", "domain", "range"],
                          ("GET", "/api/traffic/tail"): ["after", "domain", "status"]}


@pytest.mark.parametrize("path,body,field", [
    ("/api/probe", {"url": "http://nowhere.example.test/x"}, "url"),
    ("/api/diagnose", {"url": "https://nowhere.example.test/x"}, "url"),
    ("/api/warm", {"urls": ["http://a.example.test/x", "http://nowhere.example.test/x"]}, "urls"),
    ("/api/purge", {"urls": ["http://nowhere.example.test/x"]}, "urls"),
    ("/api/purge", {"domain": "nowhere.example.test", "prefix": "/"}, "domain"),
])
def test_delivery_tools_refuse_an_unknown_domain(admin, path, body, field):
    assert admin.post("/api/domains", {"host": "a.example.test"}).status == 201
    answer = admin.post(path, body)
    assert answer.status == 404 and answer.error_code == "not_found", answer.body
    assert answer.json["error"]["field"] == field and "nowhere.example.test" in answer.json["error"]["message"]


def test_conflicts_name_the_blocking_records(admin):
    assert admin.post("/api/domains", {"host": "a.example.test"}).status == 201
    again = admin.post("/api/domains", {"host": "A.example.test."})
    assert again.status == 409 and again.json["error"]["refs"] == [{"type": "domain", "id": "a.example.test"}]

    bucket = admin.post("/api/buckets", BUCKET)
    assert bucket.status == 201, bucket.body
    bucket_id = bucket.json["id"]
    twin = admin.post("/api/buckets", dict(BUCKET, name="ORIGIN"))
    assert twin.status == 409 and twin.json["error"]["refs"] == [{"type": "bucket", "id": bucket_id}]

    rule = admin.post("/api/rules", {"domain": "a.example.test", "path": "/s", "bucket": bucket_id})
    assert rule.status == 201, rule.body
    same_path = admin.post("/api/rules", {"domain": "a.example.test", "path": "/s/", "bucket": bucket_id})
    assert same_path.status == 409 and same_path.json["error"]["refs"] == [{"type": "rule", "id": rule.json["id"]}]
    in_use = admin.delete(f"/api/buckets/{bucket_id}")
    assert in_use.status == 409 and in_use.json["error"]["refs"] == [{"type": "rule", "id": rule.json["id"]}]

    me = admin.get("/api/me").json["user"]
    user_id = me["id"]
    taken = admin.post("/api/users", {"username": me["username"].upper(), "password": "another long passphrase 7",
                                      "role": "viewer"})
    assert taken.status == 409 and taken.json["error"]["refs"] == [{"type": "user", "id": user_id}]
    last = admin.put(f"/api/users/{user_id}", {"role": "viewer"})
    assert last.status == 409 and last.error_code == "last_admin"
    assert last.json["error"]["refs"] == [{"type": "user", "id": user_id}]


def test_declared_body_shapes_are_checked_before_the_handler(admin):
    for body, field in (({"host": 5}, "host"), ({"host": "a.example.test", "extra": 1}, "extra"), ({}, "host"),
                        ({"host": ""}, "host")):
        answer = admin.post("/api/domains", body)
        assert answer.status == 400 and answer.error_code == "invalid", (body, answer.body)
        assert answer.json["error"]["field"] == field, (body, answer.body)
    wrong = admin.post("/api/warm", {"urls": ["http://a.example.test/x", 7]})
    assert wrong.status == 400 and wrong.json["error"]["field"] == "urls"
    assert admin.get("/api/domains").json["domains"] == []


def test_a_body_sent_where_none_is_declared_is_refused(admin):
    """docs/API.md, "Conventions": unknown body members are 400 everywhere, DELETE included."""
    rule = admin.post("/api/domains", {"host": "a.example.test"})
    assert rule.status == 201
    refused = admin.request("DELETE", "/api/domains/a.example.test", {"force": True})
    assert refused.status == 400 and refused.error_code == "invalid", refused.body
    assert refused.json["error"]["field"] == "force"
    assert admin.get("/api/domains/a.example.test").status == 200  # nothing was deleted
    listed = admin.request("DELETE", "/api/me/sessions", [1])
    assert listed.status == 400 and listed.error_code == "invalid" and "takes no body" in listed.json["error"]["message"]
    assert admin.request("DELETE", "/api/domains/a.example.test", {}).status == 204
