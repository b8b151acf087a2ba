"""Rules in cache_mode "origin" against the node (built in the test process; the two-worker case is a
daemon) and the scripted origin (tests/origin_server.py): each case counts the origin's requests and
reads what it was sent."""

import http.client
import re
import threading
import time

import pytest

from contentnode.core.cache_ledger import INVALIDATION_RING
from tests.origin_server import OriginServer
from tests.two_workers import two_workers_with_admin  # noqa: F401  (the fixture)

HOST = "site.example.test"
pytestmark = pytest.mark.in_process


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


def shared_site(admin, origin, **rule):
    bucket = admin.post("/api/buckets", {"name": "site", "type": "http", "url": origin.url})
    assert bucket.status == 201, bucket.body
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    made = admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket.json["id"], **rule})
    assert made.status == 201, made.body
    defaults = {"cache_mode": "origin", "query": "include", "methods": "all"}   # an http bucket's
    assert {k: made.json[k] for k in defaults} == {**defaults, **{k: v for k, v in rule.items() if k in defaults}}
    return made.json


def send(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Host": HOST, **(headers or {})},
                     encode_chunked=body is not None and not isinstance(body, bytes))
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def fetch(port, path, headers=None):
    return send(port, "GET", path, headers=headers)


def fetch_at_once(port, path, count: int) -> list:
    """`count` GETs of `path` sent at once, each on its own connection: their answers."""
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(fetch(port, path))) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_fifty_concurrent_requests_make_one_origin_request(node, admin, origin):
    shared_site(admin, origin)
    origin.script("/page", b"p" * 50_000, headers={"Cache-Control": "max-age=300", "Content-Type": "text/html"},
                  delay=1.0)
    results = fetch_at_once(node.public_port, "/page", 50)
    assert [(status, body) for status, _, body in results] == [(200, b"p" * 50_000)] * 50
    assert len(origin.requests_for("/page")) == 1
    seen = origin.requests_for("/page")[0].headers
    assert seen["x-forwarded-for"] == "127.0.0.1" and seen["x-forwarded-host"] == HOST
    assert seen["x-forwarded-proto"] == "http" and seen["via"] == "1.1 contentnode"
    status, headers, _ = fetch(node.public_port, "/page")
    assert headers["cache-status"].startswith("contentnode; hit; ttl=") and headers["x-cache"] == "HIT"
    assert headers["via"] == "1.1 contentnode" and int(headers["age"]) >= 0
    assert headers["content-type"] == "text/html" and headers["cache-control"] == "max-age=300"


def test_a_304_refreshes_the_stored_answer(node, admin, origin):
    shared_site(admin, origin)
    origin.script("/r", b"r" * 20_000, headers={"Cache-Control": "max-age=1", "X-Rev": "1"}, etag='"r1"')
    assert fetch(node.public_port, "/r")[0] == 200
    node.set_clock_offset(2.2)   # past max-age=1 on the clock the cache reads
    origin.script("/r", b"r" * 20_000, headers={"Cache-Control": "max-age=300", "X-Rev": "2"}, etag='"r1"')
    status, headers, body = fetch(node.public_port, "/r")
    assert status == 200 and body == b"r" * 20_000 and headers["x-rev"] == "2"
    assert headers["cache-status"].startswith("contentnode; fwd=stale; fwd-status=304; stored")
    seen = origin.requests_for("/r")
    assert len(seen) == 2 and seen[1].headers["if-none-match"] == '"r1"'
    status, headers, _ = fetch(node.public_port, "/r")
    assert "hit" in headers["cache-status"] and len(origin.requests_for("/r")) == 2
    # the client's own conditional is answered by the node
    assert fetch(node.public_port, "/r", {"If-None-Match": '"r1"'})[0] == 304


def test_vary_variants_and_their_purge(node, admin, origin):
    shared_site(admin, origin)
    origin.script("/v", b"varied", headers={"Cache-Control": "max-age=300", "Vary": "Accept-Language"})
    for lang in ("en", "fr", "en", "fr"):
        assert fetch(node.public_port, "/v", {"Accept-Language": lang})[0] == 200
    assert [s.headers["accept-language"] for s in origin.requests_for("/v")] == ["en", "fr"]
    purged = admin.post("/api/purge", {"urls": [f"http://{HOST}/v"]})
    assert purged.status == 200 and purged.json == {"purged": 2}
    _, headers, _ = fetch(node.public_port, "/v", {"Accept-Language": "fr"})
    assert headers["cache-status"].startswith("contentnode; fwd=uri-miss")
    assert len(origin.requests_for("/v")) == 3


def test_stale_if_error_while_the_origin_is_stopped(node, admin, origin):
    shared_site(admin, origin, stale_if_error=600)
    origin.script("/s", b"still here", headers={"Cache-Control": "max-age=1"})
    origin.script("/n", b"never stored", headers={"Cache-Control": "max-age=1, must-revalidate"})
    assert fetch(node.public_port, "/s")[2] == b"still here"
    assert fetch(node.public_port, "/n")[0] == 200
    origin.stop()
    node.set_clock_offset(1.5)
    status, headers, body = fetch(node.public_port, "/s")
    assert status == 200 and body == b"still here" and 'detail="stale-if-error"' in headers["cache-status"]
    assert fetch(node.public_port, "/n")[0] == 502          # must-revalidate: never served stale


def test_query_policy(node, admin, origin):
    shared_site(admin, origin, query={"only": ["page"]})
    origin.script("/q", b"q", headers={"Cache-Control": "max-age=300"})
    fetch(node.public_port, "/q?page=2&utm=x")
    fetch(node.public_port, "/q?utm=y&page=2")
    fetch(node.public_port, "/q?page=3")
    assert [s.target for s in origin.requests_for("/q")] == ["/q?page=2", "/q?page=3"]


def test_an_origin_trickling_5_mb_over_12_s_is_not_cut(node, admin, origin):
    size = 5 * 1024 * 1024
    shared_site(admin, origin)
    origin.script("/big", bytes(range(256)) * (size // 256), headers={"Cache-Control": "max-age=300"},
                  rate=size / 12)
    started = time.monotonic()
    status, headers, body = fetch(node.public_port, "/big")
    assert status == 200 and body == bytes(range(256)) * (size // 256)
    assert time.monotonic() - started >= 11
    assert "hit" in fetch(node.public_port, "/big")[1]["cache-status"]


@pytest.mark.daemon_process
def test_two_public_workers_share_one_origin_request(two_workers_with_admin, origin):  # noqa: F811
    node, admin = two_workers_with_admin
    shared_site(admin, origin)
    origin.script("/w", b"w" * 1000, headers={"Cache-Control": "max-age=300"})
    answers = [fetch(node.public_port, "/w") for _ in range(20)]
    assert {(status, body) for status, _, body in answers} == {(200, b"w" * 1000)}
    assert len(origin.requests_for("/w")) == 1
    assert sum("hit" in headers["cache-status"] for _, headers, _ in answers) == 19


def test_a_100_kb_post_is_forwarded_intact(node, admin, origin):
    shared_site(admin, origin)
    origin.script("/form", b"thanks", status=201, headers={"Content-Type": "text/plain", "Connection": "X-Hop",
                                                          "X-Hop": "1"})
    body = bytes(range(256)) * 400
    status, headers, answer = send(node.public_port, "POST", "/form?a=1", body,
                                   {"Content-Type": "application/octet-stream", "Connection": "X-Secret",
                                    "X-Secret": "hop", "X-Forwarded-For": "6.6.6.6"})
    assert status == 201 and answer == b"thanks"
    assert headers["cache-status"] == "contentnode; fwd=method; fwd-status=201" and "x-hop" not in headers
    assert headers["via"] == "1.1 contentnode"
    [seen] = origin.requests_for("/form")
    assert seen.method == "POST" and seen.target == "/form?a=1" and seen.body_length == len(body)
    assert seen.headers["content-type"] == "application/octet-stream" and "x-secret" not in seen.headers
    assert seen.headers["x-forwarded-for"] == "127.0.0.1"        # an untrusted client's value is replaced
    chunked = send(node.public_port, "POST", "/form", iter([body[:1000], body[1000:]]),
                   {"Transfer-Encoding": "chunked"})
    assert chunked[0] == 201 and origin.requests_for("/form")[1].body_length == len(body)


def test_a_put_invalidates_the_cached_url(node, admin, origin):
    shared_site(admin, origin, max_body=1000)
    origin.script("/doc", b"v1", headers={"Cache-Control": "max-age=300"})
    assert fetch(node.public_port, "/doc")[2] == b"v1"
    assert "hit" in fetch(node.public_port, "/doc")[1]["cache-status"]
    origin.script("/doc", b"v2", headers={"Cache-Control": "max-age=300"})
    assert send(node.public_port, "PUT", "/doc", b"new text")[0] == 200
    assert fetch(node.public_port, "/doc")[2] == b"v2"
    assert len([s for s in origin.requests_for("/doc") if s.method == "GET"]) == 2
    too_big = send(node.public_port, "PUT", "/doc", b"x" * 1001)
    assert too_big[0] == 413 and b"payload_too_large" in too_big[2]
    assert [s.method for s in origin.requests_for("/doc")] == ["GET", "PUT", "GET"]



def _filling_while(port, origin, path: str, then) -> tuple:
    """GET `path` (its origin answer delayed) and, once the origin has its request, run then():
    (the GET's answer, what then() gave)."""
    got: list = []
    thread = threading.Thread(target=lambda: got.append(fetch(port, path)))
    thread.start()
    deadline = time.monotonic() + 10
    while not origin.requests_for(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    done = then()
    thread.join(30)
    return got[0], done


def test_an_invalidation_drops_the_fills_of_its_own_url_only(node, admin, origin):
    """A successful unsafe method invalidates its own URL (RFC 9111 4.4), not every fill in flight:
    a GET filling /slow while a POST to /form succeeds is stored (the origin asked once); a GET
    filling /doc?a=1 while a PUT to /doc?b=2 succeeds (the same URL, another query) is not kept."""
    shared_site(admin, origin)
    port = node.public_port
    origin.script("/slow", b"slow", headers={"Cache-Control": "max-age=300"}, delay=1.0)
    origin.script("/form", b"made", status=201)
    answer, posted = _filling_while(port, origin, "/slow", lambda: send(port, "POST", "/form", b"x")[0])
    assert posted == 201 and answer[2] == b"slow" and "stored" in answer[1]["cache-status"]
    assert "hit" in fetch(port, "/slow")[1]["cache-status"]
    assert len(origin.requests_for("/slow")) == 1
    origin.script("/doc?a=1", b"v1", headers={"Cache-Control": "max-age=300"}, delay=1.0)
    origin.script("/doc?b=2", b"changed")
    answer, put = _filling_while(port, origin, "/doc?a=1", lambda: send(port, "PUT", "/doc?b=2", b"x")[0])
    assert put == 200 and answer[2] == b"v1"
    assert "hit" not in fetch(port, "/doc?a=1")[1]["cache-status"]   # the fill in flight was not kept
    assert [s.method for s in origin.requests_for("/doc")] == ["GET", "PUT", "GET"]

def test_an_invalidation_that_removes_a_stored_answer_keeps_other_fills(node, admin, origin):
    """A POST that succeeds removes its URL's stored answer, and only that: a GET filling /slow
    meanwhile is stored (the origin asked once), and the POSTed URL is asked again."""
    shared_site(admin, origin)
    port = node.public_port
    origin.script("/news", b"v1", headers={"Cache-Control": "max-age=300"})
    assert fetch(port, "/news")[2] == b"v1" and "hit" in fetch(port, "/news")[1]["cache-status"]
    origin.script("/slow", b"slow", headers={"Cache-Control": "max-age=300"}, delay=1.0)
    origin.script("/news", b"v2", headers={"Cache-Control": "max-age=300"})
    answer, posted = _filling_while(port, origin, "/slow", lambda: send(port, "POST", "/news", b"x")[0])
    assert posted == 200 and answer[2] == b"slow" and "stored" in answer[1]["cache-status"]
    assert "hit" in fetch(port, "/slow")[1]["cache-status"]
    assert len(origin.requests_for("/slow")) == 1
    assert fetch(port, "/news")[2] == b"v2"
    assert [s.method for s in origin.requests_for("/news")] == ["GET", "POST", "GET"]


def test_a_flood_of_invalidations_that_find_nothing_keeps_the_fills(node, admin, origin):
    """More successful POSTs than the books name invalidations (INVALIDATION_RING), to a URL
    nothing is stored or filled for, while /slow fills: they touch nothing, so they tell no one,
    and the fill is stored (an anonymous flood cannot keep every long fill from being kept)."""
    shared_site(admin, origin)
    port = node.public_port
    origin.script("/slow", b"slow", headers={"Cache-Control": "max-age=300"}, delay=10.0)
    origin.script("/form", b"made", status=201)

    def posts(count: int, statuses: list) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for _ in range(count):
                conn.request("POST", "/form", body=b"x", headers={"Host": HOST})
                answer = conn.getresponse()
                answer.read()
                statuses.append(answer.status)
        finally:
            conn.close()

    def flood() -> list:
        began, statuses = time.monotonic(), []
        threads = [threading.Thread(target=posts, args=(INVALIDATION_RING // 4 + 1, statuses)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert time.monotonic() - began < 9.5, "the flood outlasted the fill: it proves nothing"
        return statuses
    answer, statuses = _filling_while(port, origin, "/slow", flood)
    assert statuses == [201] * (INVALIDATION_RING + 4)
    assert answer[2] == b"slow" and "stored" in answer[1]["cache-status"]
    assert "hit" in fetch(port, "/slow")[1]["cache-status"] and len(origin.requests_for("/slow")) == 1


def test_methods_read_answers_405(node, admin, origin):
    shared_site(admin, origin, methods="read")
    status, headers, _ = send(node.public_port, "DELETE", "/x")
    assert status == 405 and headers["allow"] == "GET, HEAD" and origin.requests_for("/x") == []


def test_warm_probe_and_diagnose_show_the_cache_decision(node, admin, origin):
    shared_site(admin, origin)
    origin.script("/p.css", b"p" * 300, headers={"Cache-Control": "max-age=600", "Content-Type": "text/css"},
                  etag='"p1"')
    url = f"https://{HOST}/p.css"
    before = admin.post("/api/probe", {"url": url})
    assert before.status == 200 and before.json["cache"]["cached"] is False and before.json["cache"]["mode"] == "origin"
    assert before.json["cache"]["cache_status"] == "contentnode; fwd=uri-miss"
    assert before.json["cache"]["decision"] == {"store": True, "why": None, "lifetime": 600, "freshness": "max-age"}
    assert before.json["origin"]["size"] == 300 and "fields" not in before.json["origin"]
    warmed = admin.post("/api/warm", {"urls": [url]})
    assert warmed.json["results"][0]["ok"] and warmed.json["results"][0]["cache"] == "miss"
    assert warmed.json["results"][0]["cache_status"].startswith("contentnode; fwd=uri-miss; fwd-status=200; stored")
    assert [s.method for s in origin.requests_for("/p.css")] == ["HEAD", "GET"]   # the probe's HEAD, warm's GET
    cache = admin.post("/api/probe", {"url": url}).json["cache"]
    assert cache["cached"] and cache["freshness"] == "max-age" and cache["lifetime"] == 600
    assert 590 <= cache["expires_in"] <= 600 and cache["etag"] == '"p1"' and cache["size"] == 300
    assert re.fullmatch(r"contentnode; hit; ttl=(59\d|600)", cache["cache_status"])
    origin.script("/gone.css", b"g", headers={"Cache-Control": "no-store, max-age=60"})
    refused = admin.post("/api/probe", {"url": f"https://{HOST}/gone.css"}).json["cache"]
    assert refused["decision"] == {"store": False, "why": "no-store", "lifetime": 60, "freshness": "max-age"}
    steps = admin.post("/api/diagnose", {"url": url}).json["steps"]
    last = steps[-1]
    assert last["name"] == "cache" and "freshness 600 s from max-age" in last["detail"]
    assert 'ETag "p1"' in last["detail"]
    assert "hit" in fetch(node.public_port, "/p.css")[1]["cache-status"]   # what warm stored serves
