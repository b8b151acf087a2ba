"""A rule's edge controls against the node (built in the test process; the two-worker case is a
daemon) and an origin that counts its requests (tests/origin_server.py): each refusal comes before
any origin request, is counted in the metrics by reason and named in the access line."""

import http.client
import threading
import time

import pytest

from tests.origin_server import OriginServer
from tests.test_access_log import access_lines, fields
from tests.test_metrics_endpoint import sample, scrape
from tests.test_origin_cache import HOST
from tests.test_origin_cache import shared_site as site
from tests.two_workers import syscalls, two_workers_with_admin, wait_until, worker_syscalls  # noqa: F401  (the fixture)

pytestmark = pytest.mark.in_process   # HTTP to the App and its access lines


@pytest.fixture
def origin():
    with OriginServer() as server:
        server.script("/f*", b"fresh", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"})
        yield server


def fetch(port, path, forwarded=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"Host": HOST, **({"X-Forwarded-For": forwarded} if forwarded else {})}
        conn.request(method, path, headers=headers)
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def refusals(node, reason):
    return sample(scrape(node), "contentnode_public_refusals_total", reason=reason)


# ---------------------------------------------------------------- access


def test_access_is_stored_normalised_and_countries_name_the_missing_database(node, admin, origin):
    rule = site(admin, origin, access={"allow": ["10.1.2.3/8", "2001:db8::1/32"], "deny": []})
    assert rule["access"] == {"allow": ["10.0.0.0/8", "2001:db8::/32"], "deny": []}
    assert admin.get(f"/api/rules/{rule['id']}").json["access"] == rule["access"]
    countries = admin.post("/api/rules", {"domain": HOST, "path": "/c", "bucket": rule["bucket"],
                                          "access": {"countries": {"deny": ["DE"]}}})
    assert countries.status == 400 and countries.json["error"]["field"] == "access.countries"
    message = countries.json["error"]["message"]
    assert "geoip_db" in message and "maxminddb" in message
    bad = admin.post("/api/rules", {"domain": HOST, "path": "/b", "bucket": rule["bucket"],
                                    "access": {"deny": ["10.0.0.0/40"]}})
    assert bad.status == 400 and bad.json["error"]["field"] == "access.deny"
    assert admin.post("/api/rules", {"domain": HOST, "path": "/u", "bucket": rule["bucket"],
                                     "access": {"block": []}}).json["error"]["field"] == "access.block"
    assert sorted(r["path"] for r in admin.get("/api/rules").json["rules"]) == ["/"]   # nothing else saved
    plain = admin.post("/api/rules", {"domain": HOST, "path": "/p", "bucket": rule["bucket"]})
    assert plain.json["access"] is None


def test_a_refused_address_never_reaches_the_origin(node, admin, origin):
    site(admin, origin, access={"allow": ["10.0.0.0/8"], "deny": ["10.9.0.0/16"]})
    status, _, body = fetch(node.public_port, "/f1")
    assert status == 403 and b'"forbidden_address"' in body
    assert fetch(node.public_port, "/f1", method="HEAD")[0] == 403
    assert origin.requests_for("/f1") == []
    # through a trusted proxy the client is the forwarded address
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    assert fetch(node.public_port, "/f1", "10.1.2.3")[:3:2] == (200, b"fresh")
    assert fetch(node.public_port, "/f1", "10.9.8.7")[0] == 403      # deny wins over allow
    assert fetch(node.public_port, "/f1", "192.0.2.1")[0] == 403
    assert len(origin.requests_for("/f1")) == 1
    assert wait_until(lambda: refusals(node, "forbidden_address") == 4, 5)
    assert wait_until(lambda: len(access_lines(node.log())) >= 5, 5)
    lines = [fields(line) for line in access_lines(node.log()) if "port=public" in line]
    # lines are written once each answer is sent, so two may swap: compare them as a multiset
    assert sorted((f["client"], f["status"], f.get("refused") or "") for f in lines) == sorted([
        ("127.0.0.1", "403", "forbidden_address"), ("127.0.0.1", "403", "forbidden_address"),
        ("10.1.2.3", "200", ""), ("10.9.8.7", "403", "forbidden_address"),
        ("192.0.2.1", "403", "forbidden_address")])


def test_a_deny_list_alone_lets_everyone_else_in(node, admin, origin):
    site(admin, origin, access={"deny": ["192.0.2.0/24"]})
    assert fetch(node.public_port, "/f2")[0] == 200
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    assert fetch(node.public_port, "/f2", "192.0.2.77")[0] == 403
    assert fetch(node.public_port, "/f2", "::ffff:192.0.2.77")[0] == 403   # an IPv4 client on a dual-stack socket
    assert fetch(node.public_port, "/f2", "198.51.100.1")[0] == 200
    assert len(origin.requests_for("/f2")) == 1


# ---------------------------------------------------------------- rate_limit


def over(answers):
    return [a for a in answers if a[0] == 429]


def test_rate_limit_refuses_past_the_burst_before_the_origin_and_per_client(node, admin, origin):
    rule = site(admin, origin, rate_limit={"rate": 1, "burst": 3})
    assert rule["rate_limit"] == {"rate": 1, "burst": 3}
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    started = time.monotonic()
    answers = [fetch(node.public_port, f"/f{n}", "192.0.2.1") for n in range(6)]
    elapsed = time.monotonic() - started
    passed = [a for a in answers if a[0] == 200]
    assert 3 <= len(passed) <= 3 + int(elapsed) and len(passed) + len(over(answers)) == 6
    status, headers, body = over(answers)[0]
    assert b'"rate_limited"' in body and 1 <= int(headers["retry-after"]) <= 1
    assert len(origin.seen) == len(passed)      # a refused request never reached the origin
    # another client has its own budget; an IPv6 client is counted by its /64
    assert fetch(node.public_port, "/f-other", "192.0.2.2")[0] == 200
    v6 = [fetch(node.public_port, f"/fg{n}", f"2001:db8:1:2::{n + 1:x}")[0] for n in range(5)]
    assert v6 == [200, 200, 200, 429, 429] and fetch(node.public_port, "/fg-next", "2001:db8:1:3::1")[0] == 200
    time.sleep(2.1)                              # a token a second comes back
    assert fetch(node.public_port, "/f-later", "192.0.2.1")[0] == 200
    refused = len(over(answers)) + v6.count(429)
    assert wait_until(lambda: refusals(node, "rate_limited") == refused, 5)
    assert wait_until(lambda: sum("refused=rate_limited" in line for line in access_lines(node.log())) == refused, 5)
    bad = admin.post("/api/rules", {"domain": HOST, "path": "/r", "bucket": rule["bucket"],
                                    "rate_limit": {"rate": 0, "burst": 1}})
    assert bad.status == 400 and bad.json["error"]["field"] == "rate_limit.rate"
    missing = admin.post("/api/rules", {"domain": HOST, "path": "/r", "bucket": rule["bucket"],
                                        "rate_limit": {"rate": 5}})
    assert missing.status == 400 and missing.json["error"]["field"] == "rate_limit.burst"
    cleared = admin.put(f"/api/rules/{rule['id']}", {"rate_limit": None})
    assert cleared.status == 200 and cleared.json["rate_limit"] is None
    assert all(fetch(node.public_port, f"/fh{n}", "192.0.2.1")[0] == 200 for n in range(5))


def test_the_rate_limit_holds_across_two_public_workers(two_workers_with_admin, origin):  # noqa: F811
    node, admin = two_workers_with_admin
    site(admin, origin, rate_limit={"rate": 1, "burst": 10})
    assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
    # the kernel picks the worker that accepts each connection: a run one worker served (almost)
    # alone shows nothing about sharing, so a new client (its own budget) asks again
    for attempt in range(3):
        client, before, seen = f"192.0.2.{attempt + 1}", worker_syscalls(node), len(origin.seen)
        refused_before = refusals(node, "rate_limited")
        answers: list = []
        started = time.monotonic()
        threads = [threading.Thread(target=lambda path=f"/f{attempt}-{n}", client=client, answers=answers:
                                    answers.append(fetch(node.public_port, path, client)))
                   for n in range(60)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        elapsed = time.monotonic() - started
        if all(syscalls(pid) >= before[pid] + 5 for pid in before):
            break
    else:
        pytest.fail("in three runs of 60 requests a worker served (almost) nothing")
    passed = [a for a in answers if a[0] == 200]
    # one budget of 10 (and a token a second) for the client, not 10 per worker
    assert len(answers) == 60 and 10 <= len(passed) <= 10 + int(elapsed) + 1, (len(passed), elapsed)
    assert len(origin.seen) - seen == len(passed)
    assert wait_until(lambda: refusals(node, "rate_limited") - refused_before == 60 - len(passed), 10)


# ---------------------------------------------------------------- headers


def test_headers_are_added_or_replace_the_answers_own_and_never_frame_or_validate(node, admin, origin):
    rule = site(admin, origin, headers={"X-Frame-Options": "DENY", "cache-control": "public, max-age=60"})
    assert rule["headers"] == {"X-Frame-Options": "DENY", "cache-control": "public, max-age=60"}
    for expect in ("miss", "hit"):
        status, headers, body = fetch(node.public_port, "/fz")
        assert status == 200 and body == b"fresh" and expect in headers["cache-status"]
        assert headers["x-frame-options"] == "DENY" and headers["cache-control"] == "public, max-age=60"
    raw = http.client.HTTPConnection("127.0.0.1", node.public_port, timeout=30)
    raw.request("HEAD", "/fz", headers={"Host": HOST})
    answer = raw.getresponse()
    assert [v for k, v in answer.getheaders() if k.lower() == "cache-control"] == ["public, max-age=60"]
    raw.close()
    for name, value in (("Content-Length", "1"), ("ETag", '"x"'), ("Connection", "close"),
                        ("Transfer-Encoding", "chunked"), ("Access-Control-Allow-Origin", "*")):
        bad = admin.put(f"/api/rules/{rule['id']}", {"headers": {name: value}})
        assert bad.status == 400 and bad.json["error"]["field"] == f"headers.{name}", (name, bad.body)
    assert admin.put(f"/api/rules/{rule['id']}", {"headers": {"X-A": "1\r\nX-B: 2"}}).status == 400
    assert admin.put(f"/api/rules/{rule['id']}", {"headers": {"X A": "1"}}).status == 400
    assert admin.get(f"/api/rules/{rule['id']}").json["headers"] == rule["headers"]   # nothing changed
    assert admin.put(f"/api/rules/{rule['id']}", {"headers": None}).json["headers"] is None
    assert fetch(node.public_port, "/fz")[1]["cache-control"] == "max-age=300"      # the origin's again


def test_a_request_waiting_for_a_thread_meets_the_rule_as_it_is_when_served(tmp_path, origin):
    """A request the listener parsed and deferred, then kept waiting for a thread (its client at
    max_requests_per_client), is judged by the rules as they are when a thread takes it: an access
    list added meanwhile refuses it, and the origin is never asked for it."""
    from tests.inprocess import InProcessNode
    from tests.node import ADMIN_PASSWORD, ADMIN_USER
    node = InProcessNode(str(tmp_path), env={"CONTENTNODE_MAX_REQUESTS_PER_CLIENT": "1"}).start()
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        rule = site(admin, origin)
        origin.script("/slow", b"slow", headers={"Cache-Control": "no-store"}, delay=1.5)
        origin.script("/other", b"other", headers={"Cache-Control": "no-store"})
        answers: dict = {}
        first = threading.Thread(target=lambda: answers.update(slow=fetch(node.public_port, "/slow")))
        first.start()
        assert wait_until(lambda: origin.requests_for("/slow"), 10)
        second = threading.Thread(target=lambda: answers.update(other=fetch(node.public_port, "/other")))
        second.start()
        time.sleep(0.3)   # parsed by the loop thread and deferred: it waits for the client's one thread
        denied = admin.put(f"/api/rules/{rule['id']}", {"access": {"deny": ["127.0.0.1/32"]}})
        assert denied.status == 200, denied.body
        first.join(30)
        second.join(30)
        assert answers["slow"][0] == 200
        assert answers["other"][0] == 403 and b'"forbidden_address"' in answers["other"][2]
        assert origin.requests_for("/other") == []
    finally:
        node.close()
