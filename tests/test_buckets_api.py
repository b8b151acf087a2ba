"""Buckets API against the real daemon and a real SeaweedFS."""

import json
import os
import uuid

import pytest

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed



@pytest.fixture(scope="module")
def origin(seaweed):
    name = "api-" + uuid.uuid4().hex[:10]
    seaweed.create_bucket(name)
    seaweed.put_object(name, "site/index.html", b"<h1>hello</h1>", "text/html")
    seaweed.put_object(name, "site/logo.bin", bytes(range(200)))
    return name


def add_bucket(admin, seaweed, bucket, **over):
    response = admin.post("/api/buckets", seaweed.bucket_definition(bucket, **over))
    assert response.status == 201, response.body
    return response.json


def audit_lines(node) -> list:
    with open(os.path.join(node.data_dir, "audit.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_create_list_read_never_show_the_secret(node, admin, seaweed, origin):
    created = add_bucket(admin, seaweed, origin)
    assert created["secret_key_set"] is True and "secret_key" not in created
    assert created["path_style"] is True and created["bucket"] == origin
    assert created["endpoint"] == seaweed.endpoint and created["region"] == "us-east-1"
    assert len(created["id"]) == 12 and created["last_check"] is None
    listing = admin.get("/api/buckets")
    assert listing.status == 200 and listing.json["buckets"] == [created]
    assert listing.json["folder_roots"] == [os.path.join(node.data_dir, "sites")]
    assert admin.get(f"/api/buckets/{created['id']}").json == created
    panel = admin.get("/api/panel")
    assert panel.json["buckets"] == [created]
    for body in (listing.body, panel.body, admin.get(f"/api/buckets/{created['id']}").body):
        assert seaweed.secret_key.encode() not in body
    assert seaweed.secret_key not in node.log()
    assert any(e["action"] == "bucket.create" and e["target"] == created["id"] for e in audit_lines(node))
    assert seaweed.secret_key not in json.dumps(audit_lines(node))


def test_path_style_defaults_to_true_for_addresses_and_false_for_names(admin, seaweed, origin):
    body = seaweed.bucket_definition(origin)
    del body["path_style"]
    assert admin.post("/api/buckets", body).json["path_style"] is True
    named = dict(body, name="aws", endpoint="https://S3.Example.COM/")
    answer = admin.post("/api/buckets", named)
    assert answer.status == 201 and answer.json["path_style"] is False
    assert answer.json["endpoint"] == "https://s3.example.com"


@pytest.mark.parametrize("change,field", [
    ({"name": ""}, "name"), ({"name": None}, "name"), ({"endpoint": "ftp://127.0.0.1:1"}, "endpoint"),
    ({"endpoint": "http://127.0.0.1:9000/base"}, "endpoint"), ({"endpoint": "http://u:p@127.0.0.1"}, "endpoint"),
    ({"endpoint": "http://127.0.0.1:99999"}, "endpoint"), ({"endpoint": "http://bad_host:80"}, "endpoint"),
    ({"region": "us east"}, "region"), ({"bucket": "UPPER"}, "bucket"), ({"bucket": "ab"}, "bucket"),
    ({"access_key": "has space"}, "access_key"), ({"secret_key": ""}, "secret_key"),
    ({"path_style": "yes"}, "path_style"), ({"path_style": False}, "path_style"), ({"color": "red"}, "color"),
    ({"name": "alerts\r\nBcc: x@example.com"}, "name"), ({"name": "a\u2028b"}, "name"),
    ({"name": "a\x7fb"}, "name"), ({"name": "a\x85b"}, "name")])
def test_bad_definitions_are_refused_and_change_nothing(admin, seaweed, change, field):
    body = dict(seaweed.bucket_definition("some-bucket"), **change)
    answer = admin.post("/api/buckets", body)
    assert answer.status == 400 and answer.error_code == "invalid"
    assert answer.json["error"]["field"] == field and answer.json["error"]["message"]
    assert admin.get("/api/buckets").json["buckets"] == []


def test_body_must_be_an_object_and_names_unique(admin, seaweed, origin):
    assert admin.post("/api/buckets", [1, 2]).error_code == "invalid"
    add_bucket(admin, seaweed, origin, name="Media")
    again = admin.post("/api/buckets", seaweed.bucket_definition(origin, name="media"))
    assert again.status == 409 and again.json["error"]["field"] == "name"
    assert len(admin.get("/api/buckets").json["buckets"]) == 1


def test_update_replaces_credentials_and_check_follows(admin, seaweed, origin):
    bucket = add_bucket(admin, seaweed, origin, secret_key="wrong-secret")
    failed = admin.post("/api/buckets/check", {"id": bucket["id"]}).json
    assert failed["ok"] is False and failed["steps"][-1]["code"] == "credentials_refused"
    assert admin.get(f"/api/buckets/{bucket['id']}").json["last_check"]["failed_step"] == "authenticate"
    updated = admin.put(f"/api/buckets/{bucket['id']}", {"secret_key": seaweed.secret_key, "name": "fixed"})
    assert updated.status == 200 and updated.json["name"] == "fixed" and "secret_key" not in updated.json
    assert updated.json["last_check"] is None and updated.json["created_at"] == bucket["created_at"]
    ok = admin.post("/api/buckets/check", {"id": bucket["id"]}).json
    assert ok["ok"] is True and ok["id"] == bucket["id"]
    assert admin.get(f"/api/buckets/{bucket['id']}").json["last_check"]["ok"] is True


def test_bad_update_changes_nothing(admin, seaweed, origin):
    bucket = add_bucket(admin, seaweed, origin)
    for change in ({"endpoint": "gopher://x"}, {"path_style": False}, {"region": ""}, {"nope": 1}):
        assert admin.put(f"/api/buckets/{bucket['id']}", change).status == 400
    assert admin.get(f"/api/buckets/{bucket['id']}").json == bucket
    assert admin.put("/api/buckets/000000000000", {"name": "x"}).status == 404


def test_check_steps_for_good_and_bad_setups(admin, seaweed, origin):
    good = admin.post("/api/buckets/check", seaweed.bucket_definition(origin)).json
    assert good["ok"] is True and good["id"] is None
    assert [s["name"] for s in good["steps"]] == ["resolve", "connect", "authenticate", "list"]
    assert all(s["ok"] and isinstance(s["ms"], (int, float)) and s["detail"] for s in good["steps"])

    wrong = admin.post("/api/buckets/check", seaweed.bucket_definition(origin, secret_key="nope")).json
    assert wrong["ok"] is False
    assert (wrong["steps"][-1]["name"], wrong["steps"][-1]["code"]) == ("authenticate", "credentials_refused")

    missing = admin.post("/api/buckets/check", seaweed.bucket_definition("absent-bucket-x")).json
    assert (missing["steps"][-1]["name"], missing["steps"][-1]["code"]) == ("list", "no_such_bucket")

    bucket = add_bucket(admin, seaweed, origin)
    with seaweed.stopped():
        stopped = admin.post("/api/buckets/check", {"id": bucket["id"]}).json
    assert stopped["ok"] is False
    assert (stopped["steps"][-1]["name"], stopped["steps"][-1]["code"]) == ("connect", "connect")
    assert "refused" in stopped["steps"][-1]["detail"]


def test_check_with_overrides_tries_without_saving(admin, seaweed, origin):
    bucket = add_bucket(admin, seaweed, origin, secret_key="wrong-secret")
    tried = admin.post("/api/buckets/check", {"id": bucket["id"], "secret_key": seaweed.secret_key}).json
    assert tried["ok"] is True
    assert admin.get(f"/api/buckets/{bucket['id']}").json["last_check"] is None
    assert admin.post("/api/buckets/check", {"id": "000000000000"}).status == 404
    incomplete = admin.post("/api/buckets/check", {"endpoint": seaweed.endpoint})
    assert incomplete.status == 400 and incomplete.json["error"]["field"] == "region"


def test_object_test_for_existing_and_missing_keys(admin, seaweed, origin):
    bucket = add_bucket(admin, seaweed, origin)
    found = admin.post("/api/buckets/test", {"id": bucket["id"], "key": "site/index.html"})
    assert found.status == 200
    result = found.json
    assert result["ok"] is True and result["size"] == 14 and result["content_type"] == "text/html"
    assert result["status"] in (200, 206) and result["etag"] and result["ms"] >= 0
    assert result["first_bytes"] == "PGgxPmhlbGxvPC9oMT4="
    missing = admin.post("/api/buckets/test", {"id": bucket["id"], "key": "site/none.html"}).json
    assert missing["ok"] is False and missing["status"] == 404
    assert missing["error"]["code"] == "no_such_key"
    assert admin.post("/api/buckets/test", {"id": bucket["id"]}).json["error"]["field"] == "key"
    assert admin.post("/api/buckets/test", {"id": bucket["id"], "key": "a\nb"}).status == 400
    assert admin.post("/api/buckets/test", {"id": "000000000000", "key": "k"}).status == 404


def test_delete_refused_while_a_rule_uses_the_bucket(admin, seaweed, origin):
    bucket = add_bucket(admin, seaweed, origin)
    assert admin.post("/api/domains", {"host": "media.example.test"}).status == 201
    rule = admin.post("/api/rules", {"domain": "media.example.test", "path": "/", "bucket": bucket["id"]})
    assert rule.status == 201, rule.body
    refused = admin.delete(f"/api/buckets/{bucket['id']}")
    assert refused.status == 409 and refused.error_code == "in_use" and rule.json["id"] in refused.json["error"]["message"]
    assert refused.json["error"]["refs"] == [{"type": "rule", "id": rule.json["id"]}]
    assert admin.get(f"/api/buckets/{bucket['id']}").status == 200
    assert admin.delete(f"/api/rules/{rule.json['id']}").status == 204
    assert admin.delete(f"/api/buckets/{bucket['id']}").status == 204
    assert admin.get(f"/api/buckets/{bucket['id']}").status == 404
    assert admin.delete(f"/api/buckets/{bucket['id']}").status == 404


def test_buckets_need_a_session(node):
    anonymous = node.client()
    assert anonymous.get("/api/buckets").status == 401
    assert anonymous.post("/api/buckets/check", {"id": "x"}).error_code == "unauthenticated"
