"""Signed links API: validation, rotation, and the links on the public port (real SeaweedFS)."""

import json
import os
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest

from contentnode.clock import parse_rfc3339
from tests.content_setup import Site
from tests.inprocess import node_class

pytestmark = pytest.mark.in_process  # HTTP to the App and SeaweedFS: no process needed


@pytest.fixture
def site(request, tmp_path, seaweed):
    instance = Site(str(tmp_path), seaweed, host=f"links-{uuid.uuid4().hex[:6]}.example.test",
                    node_class=node_class(request))
    instance.add_rule("/private", prefix="secret/", signed=True)
    instance.add_rule("/open", prefix="public/")
    instance.put("secret/doc.txt", b"signed content")
    yield instance
    instance.close()


def sign(site, path, expires_in=600, **extra):
    answer = site.admin.post("/api/links", {"url": f"http://{site.host}:{site.node.public_port}{path}",
                                            "expires_in": expires_in, **extra})
    assert answer.status == 200, answer.body
    return answer.json


def local(url):
    """The path and query of a signed URL, to send to the public port."""
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def test_link_answer_shape(site):
    link = sign(site, "/private/doc.txt?download=1", expires_in=90)
    params = {k: v[0] for k, v in parse_qs(urlsplit(link["url"]).query).items()}
    assert set(params) == {"download", "exp", "kid", "sig"} and params["kid"] == link["kid"]
    assert link["url"].startswith(f"http://{site.host}:{site.node.public_port}/private/doc.txt?")
    assert link["expires_at"].endswith("Z") and link["rule_signed"] is True and link["rule"]
    assert site.get(local(link["url"])).body == b"signed content"


@pytest.mark.parametrize("body,field", [
    ({"url": "http://unknown.example.test/private/a", "expires_in": 60}, "url"),
    ({"url": "ftp://HOST/private/a", "expires_in": 60}, "url"),
    ({"url": "http://HOST/nothing/here", "expires_in": 60}, "url"),
    ({"url": "http://HOST/private/a#frag", "expires_in": 60}, "url"),
    ({"url": "http://user:pw@HOST/private/a", "expires_in": 60}, "url"),
    ({"url": "http://HOST:badport/private/a", "expires_in": 60}, "url"),
    ({"url": "http://HOST/private/%ff", "expires_in": 60}, "url"),
    ({"url": "http://HOST/private/a", "expires_in": 0}, "expires_in"),
    ({"url": "http://HOST/private/a", "expires_in": 31 * 86400 + 1}, "expires_in"),
    ({"url": "http://HOST/private/a", "expires_in": "60"}, "expires_in"),
    ({"url": "http://HOST/private/a"}, "expires_in"),
    ({"expires_in": 60}, "url"),
    ({"url": "http://HOST/private/a", "expires_in": 60, "ip": "10.0.0.300"}, "ip"),
    ({"url": "http://HOST/private/a", "expires_in": 60, "color": 1}, "color")])
def test_invalid_link_requests(site, body, field):
    if "url" in body:
        body = dict(body, url=body["url"].replace("HOST", site.host))
    answer = site.admin.post("/api/links", body)
    assert answer.status == 400 and answer.json["error"]["field"] == field, answer.body


def test_valid_expired_tampered_other_path_other_host(site):
    site.put("secret/other.txt", b"other")
    second = f"alt-{uuid.uuid4().hex[:6]}.example.test"
    site.add_domain(second)
    site.add_rule("/private", domain=second, prefix="secret/", signed=True)
    link = local(sign(site, "/private/doc.txt", expires_in=60)["url"])
    assert site.get(link).status == 200
    sig = parse_qs(urlsplit(link).query)["sig"][0]
    tampered = link.replace(sig, ("A" if sig[0] != "A" else "B") + sig[1:])
    assert site.get(tampered).status == 403
    later = link.replace("exp=", "exp=9")
    assert site.get(later).status == 403
    assert site.get(link.replace("/private/doc.txt", "/private/other.txt")).status == 403
    assert site.get(link, host=second).status == 403
    assert site.get("/private/doc.txt").status == 403
    site.node.set_clock_offset(120)
    try:
        assert site.get(link).error_code == "link_expired"
    finally:
        site.node.set_clock_offset(0)


def test_client_address_binding(site):
    bound = local(sign(site, "/private/doc.txt", ip="127.0.0.1")["url"])
    assert "ip=127.0.0.1" in bound and site.get(bound).status == 200
    elsewhere = local(sign(site, "/private/doc.txt", ip="192.0.2.1")["url"])
    assert site.get(elsewhere).status == 403


def test_rotation_grace_then_retirement(site):
    old = local(sign(site, "/private/doc.txt", expires_in=3600)["url"])
    rotated = site.admin.post("/api/links/rotate", {"grace_seconds": 300})
    assert rotated.status == 200, rotated.body
    answer = rotated.json
    assert answer["kid"] != answer["previous_kid"] and answer["previous_valid_until"].endswith("Z")
    assert [(k["kid"], k["current"]) for k in answer["keys"]] == [(answer["previous_kid"], False),
                                                                  (answer["kid"], True)]
    new = local(sign(site, "/private/doc.txt", expires_in=3600)["url"])
    assert f"kid={answer['kid']}" in new
    assert site.get(old).status == 200  # within the grace period
    site.node.set_clock_offset(360)
    try:
        assert site.get(old).status == 403  # the previous key is retired
        assert site.get(new).status == 200
        keys = site.admin.get("/api/links/keys").json["keys"]
        assert [k["kid"] for k in keys] == [answer["kid"]]
    finally:
        site.node.set_clock_offset(0)


def test_rotation_defaults_and_validation(site):
    assert site.admin.get("/api/links/keys").json == {"keys": []}
    first = site.admin.post("/api/links/rotate")
    assert first.status == 200 and first.json["previous_kid"] is None
    second = site.admin.post("/api/links/rotate", {})
    assert second.json["previous_kid"] == first.json["kid"]
    until = parse_rfc3339(second.json["previous_valid_until"])
    assert abs(until - parse_rfc3339(second.json["keys"][-1]["created_at"]) - 86400) <= 1  # 24 h by default
    immediate = site.admin.post("/api/links/rotate", {"grace_seconds": 0}).json
    assert immediate["previous_valid_until"] is None
    assert [k["kid"] for k in immediate["keys"]] == [second.json["previous_kid"], immediate["kid"]]
    for bad in ({"grace_seconds": -1}, {"grace_seconds": 31 * 86400 + 1}, {"grace_seconds": "1"}, {"x": 1}):
        assert site.admin.post("/api/links/rotate", bad).status == 400


def test_grace_default_comes_from_settings_and_panel_lists_keys(site):
    assert site.admin.put("/api/settings", {"link_grace_seconds": 600}).status == 200
    site.admin.post("/api/links/rotate")
    second = site.admin.post("/api/links/rotate").json
    until = parse_rfc3339(second["previous_valid_until"])
    assert abs(until - parse_rfc3339(second["keys"][-1]["created_at"]) - 600) <= 1
    panel = site.admin.get("/api/panel").json["links"]
    assert [k["kid"] for k in panel["keys"]] == [k["kid"] for k in second["keys"]]
    assert all(set(k) == {"kid", "current", "created_at", "retires_at"} for k in panel["keys"])


def test_signing_keys_never_leave_the_state_file(site):
    sign(site, "/private/doc.txt")
    site.admin.post("/api/links/rotate", {})
    with open(os.path.join(site.node.data_dir, "state.json"), encoding="utf-8") as f:
        secrets = [k["secret"] for k in json.load(f)["links"]["keys"].values()]
    assert len(secrets) == 2
    with open(os.path.join(site.node.data_dir, "audit.jsonl"), encoding="utf-8") as f:
        audit = f.read()
    exposed = [site.admin.get("/api/links/keys").body, site.admin.get("/api/panel").body,
               audit.encode(), site.node.log().encode()]
    for secret in secrets:
        assert all(secret.encode() not in blob for blob in exposed)
    assert '"action":"links.rotate"' in audit.replace(" ", "") and '"action":"link.create"' in audit.replace(" ", "")


def test_scopes_of_buckets_rules_and_links(site):
    """viewer reads, operator writes buckets, rules and links, only settings:write rotates keys."""
    password = "a long enough passphrase 42"
    clients = {}
    for role in ("viewer", "operator"):
        made = site.admin.post("/api/users", {"username": role, "password": password, "role": role})
        assert made.status == 201, made.body
        clients[role] = site.node.client()
        assert clients[role].login(role, password).status == 200
    made = site.admin.post("/api/users", {"username": "counter", "password": password, "role": "custom",
                                          "scopes": ["metrics:read"]})
    assert made.status == 201, made.body
    counter = site.node.client()
    assert counter.login("counter", password).status == 200
    viewer, operator = clients["viewer"], clients["operator"]
    link = {"url": f"http://{site.host}/private/doc.txt", "expires_in": 60}
    bucket = site.seaweed.bucket_definition(site.bucket, name="scoped")

    assert viewer.get("/api/buckets").status == 200 and viewer.get("/api/rules").status == 200
    for path, body in (("/api/buckets", bucket), ("/api/rules", {"path": "/x"}), ("/api/links", link),
                       ("/api/buckets/check", {"id": site.bucket_id}), ("/api/links/rotate", {})):
        assert viewer.post(path, body).error_code == "forbidden"
    assert viewer.delete(f"/api/buckets/{site.bucket_id}").error_code == "forbidden"
    panel = viewer.get("/api/panel").json
    assert "buckets" in panel and "rules" in panel

    assert operator.post("/api/buckets", bucket).status == 201
    assert operator.post("/api/links", link).status == 200
    assert operator.post("/api/links/rotate", {}).error_code == "forbidden"
    assert operator.get("/api/links/keys").error_code == "forbidden"

    assert counter.get("/api/buckets").error_code == "forbidden"
    assert counter.get("/api/rules").error_code == "forbidden"
    panel = counter.get("/api/panel").json
    assert "buckets" not in panel and "rules" not in panel
