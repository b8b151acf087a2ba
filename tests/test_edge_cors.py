"""A rule's `cors` and `referers` against the node (built in the test process) and an origin that
counts its requests (tests/origin_server.py): the answer fields for an allowed origin and none for
another, the preflight the node answers itself, hotlink refusals before any origin request, each
refusal counted by reason and named in the access line."""

import http.client

import pytest

from tests.origin_server import OriginServer
from tests.test_access_log import access_lines, fields
from tests.test_edge_controls import refusals
from tests.test_origin_cache import HOST
from tests.test_origin_cache import shared_site as site
from tests.two_workers import wait_until

pytestmark = pytest.mark.in_process   # HTTP to the App and its access lines
PAGE = "https://app.example"
CORS_FIELDS = ("access-control-allow-origin", "access-control-allow-methods", "access-control-allow-headers",
               "access-control-max-age", "access-control-allow-credentials")


@pytest.fixture
def origin():
    with OriginServer() as server:
        server.script("/f*", b"fresh", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain",
                                               "Vary": "Accept-Encoding"})
        yield server


def send(port, method, path, **headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers={"Host": HOST, **{k.replace("_", "-"): v for k, v in headers.items()}})
        answer = conn.getresponse()
        return answer.status, answer.getheaders(), answer.read()
    finally:
        conn.close()


def named(headers, name) -> list:
    return [v for k, v in headers if k.lower() == name]


def cors_fields(headers) -> dict:
    return {k.lower(): v for k, v in headers if k.lower() in CORS_FIELDS}


def preflight(port, path, origin, method="PUT", request_headers=None):
    extra = {"Access-Control-Request-Headers": request_headers} if request_headers else {}
    return send(port, "OPTIONS", path, Origin=origin, Access_Control_Request_Method=method, **extra)


# ---------------------------------------------------------------- cors


def test_cors_is_stored_normalised_and_bad_lists_change_nothing(node, admin, origin):
    rule = site(admin, origin, cors={"origins": ["HTTPS://App.Example:443/", "http://127.0.0.1:8080"],
                                     "headers": ["X-Token", "x-token"], "max_age": 600})
    assert rule["cors"] == {"origins": ["https://app.example", "http://127.0.0.1:8080"], "methods": ["GET", "HEAD"],
                            "headers": ["x-token"], "max_age": 600}
    for bad, field in ((["*", PAGE], "cors.origins"), (["https://app.example/path"], "cors.origins"),
                       (["ftp://app.example"], "cors.origins"), (["null"], "cors.origins"),
                       ([], "cors.origins")):
        answer = admin.put(f"/api/rules/{rule['id']}", {"cors": {"origins": bad}})
        assert answer.status == 400 and answer.json["error"]["field"] == field, (bad, answer.body)
    for member, value in (("methods", ["GE T"]), ("headers", ["a:b"]), ("max_age", 86_401), ("credentials", True)):
        answer = admin.put(f"/api/rules/{rule['id']}", {"cors": {"origins": [PAGE], member: value}})
        assert answer.status == 400 and answer.json["error"]["field"] == f"cors.{member}", (member, answer.body)
    path = admin.put(f"/api/rules/{rule['id']}", {"cors": {"origins": ["https://app.example/path"]}})
    assert "is an origin plus a path" in path.json["error"]["message"]
    assert admin.get(f"/api/rules/{rule['id']}").json["cors"] == rule["cors"]          # nothing changed
    assert admin.put(f"/api/rules/{rule['id']}", {"cors": None}).json["cors"] is None


def test_cors_answers_carry_the_origin_it_allows_and_nothing_for_others(node, admin, origin):
    site(admin, origin, cors={"origins": [PAGE]})
    for expect in ("miss", "hit"):
        status, headers, body = send(node.public_port, "GET", "/f1", Origin=PAGE)
        assert status == 200 and body == b"fresh" and expect in named(headers, "cache-status")[0]
        assert cors_fields(headers) == {"access-control-allow-origin": PAGE}
        assert "Origin" in named(headers, "vary") and "Accept-Encoding" in ", ".join(named(headers, "vary"))
    status, headers, body = send(node.public_port, "GET", "/f1", Origin="https://evil.example")
    assert status == 200 and body == b"fresh" and cors_fields(headers) == {}
    assert "Origin" in named(headers, "vary")         # caches keep the answers per origin apart
    status, headers, _ = send(node.public_port, "GET", "/f1")
    assert status == 200 and cors_fields(headers) == {}
    assert cors_fields(send(node.public_port, "HEAD", "/f1", Origin=PAGE)[1]) == {"access-control-allow-origin": PAGE}
    # an http origin's own CORS fields give way to the rule's
    origin.script("/own-cors", b"x", headers={"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": "true"})
    status, headers, _ = send(node.public_port, "GET", "/own-cors", Origin="https://evil.example")
    assert status == 200 and cors_fields(headers) == {}
    status, headers, _ = send(node.public_port, "GET", "/own-cors", Origin=PAGE)
    assert named(headers, "access-control-allow-origin") == [PAGE] and "access-control-allow-credentials" not in cors_fields(headers)
    assert len(origin.requests_for("/f1")) == 1


def test_a_preflight_is_answered_by_the_node_without_any_origin_request(node, admin, origin):
    site(admin, origin, cors={"origins": [PAGE], "methods": ["GET", "PUT"], "headers": ["X-Token"], "max_age": 600})
    status, headers, body = preflight(node.public_port, "/f2", PAGE, "PUT", "x-token")
    assert (status, body) == (204, b"")
    assert cors_fields(headers) == {"access-control-allow-origin": PAGE, "access-control-allow-methods": "GET, PUT",
                                    "access-control-allow-headers": "x-token", "access-control-max-age": "600"}
    assert named(headers, "vary") == ["Origin"]
    status, headers, body = preflight(node.public_port, "/f2", "https://evil.example")
    assert status == 403 and b'"forbidden_origin"' in body and cors_fields(headers) == {}
    status, headers, _ = preflight(node.public_port, "/f2", "https://app.example.evil.example")
    assert status == 403 and cors_fields(headers) == {}
    assert origin.seen == []                         # neither preflight reached the origin
    # an OPTIONS that is no preflight is forwarded as before (methods "all" on an http bucket)
    assert send(node.public_port, "OPTIONS", "/f2", Origin=PAGE)[0] == 200   # the origin's answer
    assert [s.method for s in origin.seen] == ["OPTIONS"]
    assert wait_until(lambda: refusals(node, "forbidden_origin") == 2, 5)
    assert wait_until(lambda: sum("refused=forbidden_origin" in line for line in access_lines(node.log())) == 2, 5)


def test_any_origin_is_a_star_without_vary_and_a_rule_without_cors_leaves_preflights_alone(node, admin, origin):
    rule = site(admin, origin, cors={"origins": ["*"]})
    status, headers, _ = send(node.public_port, "GET", "/f3", Origin="https://anyone.example")
    assert status == 200 and cors_fields(headers) == {"access-control-allow-origin": "*"}
    assert "Origin" not in ", ".join(named(headers, "vary"))
    assert cors_fields(send(node.public_port, "GET", "/f3")[1]) == {"access-control-allow-origin": "*"}
    status, headers, _ = preflight(node.public_port, "/f3", "https://anyone.example", "GET")
    assert status == 204 and cors_fields(headers) == {"access-control-allow-origin": "*",
                                                      "access-control-allow-methods": "GET, HEAD"}
    assert admin.put(f"/api/rules/{rule['id']}", {"cors": None, "methods": "read"}).status == 200
    status, headers, _ = preflight(node.public_port, "/f3", "https://anyone.example", "GET")
    assert status == 405 and cors_fields(headers) == {}
    assert cors_fields(send(node.public_port, "GET", "/f3", Origin="https://anyone.example")[1]) == {}


def test_a_preflight_meets_the_access_list_first(node, admin, origin):
    site(admin, origin, cors={"origins": [PAGE]}, access={"allow": ["10.0.0.0/8"]})
    status, headers, body = preflight(node.public_port, "/f4", PAGE)
    assert status == 403 and b'"forbidden_address"' in body and cors_fields(headers) == {}


# ---------------------------------------------------------------- referers


def test_referers_refuse_other_pages_before_the_origin_and_count_them(node, admin, origin):
    rule = site(admin, origin, referers={"allow": ["*.Partner.example", "friend.example"], "empty": False})
    assert rule["referers"] == {"allow": ["*.partner.example", "friend.example"], "empty": False}
    allowed = ["https://friend.example/page", "http://cdn.partner.example:8080/a?b", f"https://{HOST}/own-page",
               "https://a.b.partner.example/"]
    refused = ["https://evil.example/", "https://partner.example/", "https://friend.example.evil.example/",
               "https://evilfriend.example/", "not a url", None]
    for n, referer in enumerate(allowed):
        status, _, body = send(node.public_port, "GET", f"/f-ok{n}", Referer=referer)
        assert (status, body) == (200, b"fresh"), referer
    for n, referer in enumerate(refused):
        extra = {"Referer": referer} if referer is not None else {}
        status, _, body = send(node.public_port, "GET", f"/f-no{n}", **extra)
        assert status == 403 and b'"forbidden_referer"' in body, referer
    assert sorted(s.path for s in origin.seen) == sorted(f"/f-ok{n}" for n in range(len(allowed)))
    assert wait_until(lambda: refusals(node, "forbidden_referer") == len(refused), 5)
    assert wait_until(lambda: len(access_lines(node.log())) >= len(allowed) + len(refused), 5)
    lines = [fields(line) for line in access_lines(node.log()) if "port=public" in line]
    # lines are written once each answer is sent, so two may swap: compare by path
    assert {f["path"]: f.get("refused") for f in lines} == {
        **{f"/f-ok{n}": None for n in range(len(allowed))}, **{f"/f-no{n}": "forbidden_referer" for n in range(len(refused))}}
    # "empty" (default true) lets requests without a Referer in
    assert admin.put(f"/api/rules/{rule['id']}", {"referers": {"allow": []}}).json["referers"] == {
        "allow": [], "empty": True}
    assert send(node.public_port, "GET", "/f-none")[0] == 200
    assert send(node.public_port, "GET", "/f-none", Referer="https://friend.example/")[0] == 403
    for bad in ({"allow": ["exa mple.com"]}, {"allow": ["*"]}, {"allow": ["10.0.0.1"]}, {"empty": "no"},
                {"allow": "friend.example"}, {"deny": []}):
        answer = admin.put(f"/api/rules/{rule['id']}", {"referers": bad})
        assert answer.status == 400 and answer.json["error"]["field"].startswith("referers."), (bad, answer.body)
    assert admin.get(f"/api/rules/{rule['id']}").json["referers"] == {"allow": [], "empty": True}
