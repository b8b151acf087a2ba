"""A domain's `access` and `error_pages` (PUT /api/domains/{host}) against the node (built in the
test process; the two-worker case is a daemon) and origins that count their requests
(tests/origin_server.py): the domain's list refuses before the rule's and before any origin
request; an error answer carries the page its status names, read from the bucket of the rule that
matched, with the error's status; with two public workers too."""

import http.client
import threading

import pytest

from tests.node import ADMIN_PASSWORD
from tests.origin_server import OriginServer
from tests.test_access_log import access_lines, fields
from tests.test_edge_controls import refusals
from tests.test_origin_cache import HOST
from tests.test_origin_cache import shared_site as site
from tests.two_workers import syscalls, two_workers_with_admin, wait_until, worker_syscalls  # noqa: F401  (the fixture)

pytestmark = pytest.mark.in_process   # HTTP to the App and its access lines
PAGE_404 = b"<!doctype html><title>Not here</title><p>Nothing at this address."
PAGE_5XX = b"<!doctype html><title>Sorry</title><p>Try again in a minute."
PAGES = {"404": "errors/404.html", "5xx": "errors/5xx.html"}


@pytest.fixture
def origin():
    with OriginServer() as server:
        server.script("/f*", b"fresh", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"})
        server.script("/broken", b"origin trouble", status=500)
        server.script("/errors/404.html", PAGE_404, headers={"Content-Type": "text/html; charset=utf-8"})
        server.script("/errors/5xx.html", PAGE_5XX, headers={"Content-Type": "text/html; charset=utf-8"})
        yield server


def send(port, path, method="GET", host=HOST, **headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers={"Host": host, **{k.replace("_", "-"): v for k, v in headers.items()}})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def at_once(port, paths, **headers) -> list:
    """The answers to GETs of `paths`, all sent at once (each on its own connection)."""
    answers: list = []
    threads = [threading.Thread(target=lambda p=p: answers.append(send(port, p, **headers))) for p in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def plain_site(admin, origin, **rule):
    """The site on the node's own cache (not the origin's answers relayed): its misses and failures are the node's."""
    return site(admin, origin, cache_mode="override", methods="read", query="ignore", **rule)


# ---------------------------------------------------------------- PUT /api/domains/{host}


def test_put_domain_stores_access_and_pages_and_refuses_bad_input_changing_nothing(node, admin, origin):
    plain_site(admin, origin)
    before = admin.get(f"/api/domains/{HOST}")
    assert before.json["access"] is None and before.json["error_pages"] is None
    made = admin.put(f"/api/domains/{HOST}", {"access": {"deny": ["192.0.2.9/24"]}, "error_pages": PAGES},
                     headers={"If-Match": before.headers["etag"]})
    assert made.status == 200, made.body
    assert made.json["access"] == {"allow": [], "deny": ["192.0.2.0/24"]} and made.json["error_pages"] == PAGES
    assert made.json["revision"] > before.json["revision"] and made.headers["etag"] != before.headers["etag"]
    stale = admin.put(f"/api/domains/{HOST}", {"access": None}, headers={"If-Match": before.headers["etag"]})
    assert stale.status == 412 and stale.json["error"]["code"] == "precondition_failed"
    for body, field in (({"error_pages": {"600": "e.html"}}, "error_pages.600"),
                        ({"error_pages": {"4x": "e.html"}}, "error_pages.4x"),
                        ({"error_pages": {"404": "/errors/404.html"}}, "error_pages.404"),
                        ({"error_pages": {"404": "errors/"}}, "error_pages.404"),
                        ({"error_pages": {"404": "a/../b"}}, "error_pages.404"),
                        ({"error_pages": {"404": ""}}, "error_pages.404"),
                        ({"error_pages": {str(400 + n): "e" for n in range(21)}}, "error_pages"),
                        ({"error_pages": "errors/404.html"}, "error_pages"),
                        ({"access": {"deny": ["10.0.0.0/40"]}}, "access.deny"),
                        ({"access": {"countries": {"deny": ["DE"]}}}, "access.countries"),
                        ({"access": None, "redirect": None}, "redirect"),
                        ({"status": "verified"}, "status")):
        answer = admin.put(f"/api/domains/{HOST}", body)
        assert answer.status == 400 and answer.json["error"]["code"] == "invalid", (body, answer.body)
        assert answer.json["error"]["field"] == field, (body, answer.body)
    after = admin.get(f"/api/domains/{HOST}").json
    assert after == made.json                                     # nothing changed
    assert admin.put("/api/domains/other.example.test", {"access": None}).status == 404
    reader = admin.post("/api/me/tokens", {"name": "reader", "scopes": ["domains:read"], "password": ADMIN_PASSWORD})
    assert reader.status == 201, reader.body
    script = node.client()
    assert script.post("/api/login", {"token": reader.json["secret"]}).status == 200
    by_token = script.put(f"/api/domains/{HOST}", {"access": None})
    assert by_token.status == 403 and by_token.json["error"]["code"] == "forbidden"     # domains:write needed
    cleared = admin.put(f"/api/domains/{HOST}", {"error_pages": None})
    assert cleared.json["error_pages"] is None and cleared.json["access"] == made.json["access"]


# ---------------------------------------------------------------- domain access


def test_the_domains_access_refuses_before_the_rules_and_before_the_origin(node, admin, origin):
    plain_site(admin, origin, access={"allow": ["192.0.2.0/24", "198.51.100.0/24"]})
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    assert admin.put(f"/api/domains/{HOST}", {"access": {"deny": ["198.51.100.0/24"]}}).status == 200
    assert send(node.public_port, "/f1", X_Forwarded_For="192.0.2.1")[::2] == (200, b"fresh")
    status, _, body = send(node.public_port, "/f2", X_Forwarded_For="198.51.100.7")   # the rule allows it
    assert status == 403 and b'"forbidden_address"' in body
    assert send(node.public_port, "/f3", X_Forwarded_For="203.0.113.5")[0] == 403     # the rule refuses it
    assert [s.path for s in origin.seen] == ["/f1"]
    assert admin.put(f"/api/domains/{HOST}", {"access": {"allow": ["203.0.113.0/24"]}}).status == 200
    assert send(node.public_port, "/f4", X_Forwarded_For="192.0.2.1")[0] == 403      # the domain's allow
    assert [s.path for s in origin.seen] == ["/f1"]
    assert wait_until(lambda: refusals(node, "forbidden_address") == 3, 5)
    assert wait_until(lambda: len(access_lines(node.log())) >= 4, 5)
    lines = [fields(line) for line in access_lines(node.log()) if "port=public" in line]
    # A line is written once its answer is sent, so the client may already send the next request
    # (and its refusal be logged) before the line of the one before: compare by path, not order.
    assert {f["path"]: f.get("refused") for f in lines} == {"/f1": None, "/f2": "forbidden_address",
                                                           "/f3": "forbidden_address", "/f4": "forbidden_address"}


# ---------------------------------------------------------------- error pages


def test_error_pages_come_from_the_matched_rules_bucket_with_the_errors_status(node, admin, origin):
    rule = plain_site(admin, origin, access={"deny": ["192.0.2.0/24"]})
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    plain = send(node.public_port, "/missing")
    assert plain[0] == 404 and plain[1]["content-type"].startswith("application/json")
    assert admin.put(f"/api/domains/{HOST}", {"error_pages": {**PAGES, "403": "errors/403.html"}}).status == 200
    for method in ("GET", "HEAD"):
        status, headers, body = send(node.public_port, "/missing", method)
        assert (status, headers["content-type"]) == (404, "text/html; charset=utf-8")
        assert body == (PAGE_404 if method == "GET" else b"")
        assert headers["content-length"] == str(len(PAGE_404)) and headers["cache-control"] == "no-store"
    assert len(origin.requests_for("/errors/404.html")) == 1         # read once, then from the cache
    status, headers, body = send(node.public_port, "/broken")      # the origin fails: the node's 502
    assert (status, body) == (502, PAGE_5XX) and headers["content-type"] == "text/html; charset=utf-8"
    # a page the bucket lacks (403 here) leaves the plain answer: no loop, one look for it per refusal
    status, headers, body = send(node.public_port, "/f1", X_Forwarded_For="192.0.2.1")
    assert status == 403 and b'"forbidden_address"' in body
    assert len(origin.requests_for("/errors/403.html")) == 1
    assert send(node.public_port, "/f1", X_Forwarded_For="192.0.2.1")[0] == 403
    assert len(origin.requests_for("/errors/403.html")) == 2       # a missing page is not kept
    assert origin.requests_for("/f1") == []                       # the refusal still came first
    # a page is its own cache entry: the path of the page's key still serves what its rule maps it to
    other = OriginServer().start()
    try:
        other.script("/errors/404.html", b"the other bucket's page", headers={"Content-Type": "text/html"})
        bucket = admin.post("/api/buckets", {"name": "other", "type": "http", "url": other.url}).json["id"]
        made = admin.post("/api/rules", {"domain": HOST, "path": "/other", "bucket": bucket, "prefix": "nothing/",
                                         "cache_mode": "override", "methods": "read", "query": "ignore"})
        assert made.status == 201, made.body
        assert send(node.public_port, "/other/x")[::2] == (404, b"the other bucket's page")
        assert send(node.public_port, "/other/errors/404.html")[::2] == (404, b"the other bucket's page")
        assert [s.path for s in other.seen].count("/errors/404.html") == 1
    finally:
        other.stop()
    assert send(node.public_port, "/errors/404.html")[::2] == (200, PAGE_404)   # the content itself
    assert admin.put(f"/api/rules/{rule['id']}", {"enabled": False}).status == 200
    assert send(node.public_port, "/f9")[::2] == (404, PAGE_404)   # a disabled rule still names the bucket


def test_two_public_workers_follow_the_domains_members(two_workers_with_admin, origin):  # noqa: F811
    node, admin = two_workers_with_admin
    plain_site(admin, origin)
    assert send(node.public_port, "/missing")[1]["content-type"].startswith("application/json")   # no page yet
    assert admin.put(f"/api/domains/{HOST}", {"error_pages": PAGES,
                                               "access": {"deny": ["127.0.0.0/8"]}}).status == 200
    before = worker_syscalls(node)
    answers: list = []
    for _ in range(5):   # the kernel may hand one round's connections to one worker on a busy machine
        answers += at_once(node.public_port, [f"/f{len(answers) + n}" for n in range(40)])
        if all(syscalls(pid) >= before[pid] + 5 for pid in before):
            break
    assert all(syscalls(pid) >= before[pid] + 5 for pid in before), "a worker served (almost) nothing"
    assert all(a[0] == 403 and b'"forbidden_address"' in a[2] for a in answers)
    assert not [s for s in origin.seen if s.path.startswith("/f")]
    assert wait_until(lambda: refusals(node, "forbidden_address") == len(answers), 10)
    assert admin.put(f"/api/domains/{HOST}", {"access": None}).status == 200
    answers = at_once(node.public_port, [f"/gone{n}" for n in range(40)])
    assert len(answers) == 40 and all(a[::2] == (404, PAGE_404) for a in answers)
    # each process reads the page once at most (a fill in one is a hit in the other, or its own read)
    assert 1 <= len(origin.requests_for("/errors/404.html")) <= 2
    # a refusal with a page keeps its status, its count and its access line field
    rule = admin.get("/api/rules").json["rules"][0]
    assert admin.put(f"/api/rules/{rule['id']}", {"referers": {"allow": ["friend.example"], "empty": False}}).status == 200
    assert admin.put(f"/api/domains/{HOST}", {"error_pages": {**PAGES, "403": "errors/404.html"}}).status == 200
    answers = at_once(node.public_port, [f"/h{n}" for n in range(40)], Referer="https://evil.example/")
    assert len(answers) == 40 and all(a[::2] == (403, PAGE_404) for a in answers)
    assert at_once(node.public_port, ["/f-ok"], Referer="https://friend.example/a")[0][::2] == (200, b"fresh")
    assert not [s for s in origin.seen if s.path.startswith("/h")]
    assert wait_until(lambda: refusals(node, "forbidden_referer") == 40, 10)
    assert wait_until(lambda: sum("refused=forbidden_referer" in line for line in access_lines(node.log())) == 40, 10)


def test_a_refused_hit_held_in_memory_gets_its_page_and_is_counted_once(node, admin, origin):
    """A hit held in memory is answered by the listener's loop thread; its refusal's page is a bucket
    read, so the request goes to the pool and is checked again there: one page, one count."""
    origin.script("/errors/403.html", b"not for you", headers={"Content-Type": "text/html"})
    plain_site(admin, origin)
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    for _ in range(3):
        assert send(node.public_port, "/f-held")[::2] == (200, b"fresh")     # now a hit in memory
    assert admin.put(f"/api/domains/{HOST}", {"access": {"deny": ["192.0.2.0/24"]},
                                               "error_pages": {"403": "errors/403.html"}}).status == 200
    for n in range(1, 6):
        assert send(node.public_port, "/f-held", X_Forwarded_For="192.0.2.1")[::2] == (403, b"not for you")
        assert wait_until(lambda: refusals(node, "forbidden_address") == n, 5), refusals(node, "forbidden_address")
    assert send(node.public_port, "/f-held")[::2] == (200, b"fresh")
    assert origin.requests_for("/f-held") != [] and len(origin.requests_for("/f-held")) == 1
