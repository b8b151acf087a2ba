"""Bucket type "http" against the real daemon and the scripted origin (tests/origin_server.py).

CRUD and validation, the outbound guard at save and at connect (the node's
own admin and public ports, link-local/metadata, also when DNS re-points a
saved name), check and test over HTTP and HTTPS, and serving GET/HEAD through
a rule: kept-alive origin connections, a trickling origin served whole, a
dead or hanging origin answering quickly without holding the public port.
"""

import http.client
import socket
import threading
import time

import pytest

from tests import certgen
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.inprocess import node_class
from tests.origin_server import OriginServer, free_port
from tests.peers.pebble import ChallTestSrv

HOST = "site.example.test"
# `node` is the App in the test process (no interpreter start per test); the tests that time many
# concurrent requests keep a daemon process, as do the public workers (a process of their own).
pytestmark = pytest.mark.in_process


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


def add_bucket(admin, url, **fields):
    answer = admin.post("/api/buckets", {"name": fields.pop("name", "site"), "type": "http", "url": url, **fields})
    assert answer.status == 201, answer.body
    return answer.json


def serve(admin, bucket_id, **rule):
    """A rule on the bucket in cache_mode "override" (the fixed-TTL cache these cases are about; a
    rule in "origin" mode, the http default, is tests/test_origin_cache.py's)."""
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    rule.setdefault("cache_mode", "override")
    answer = admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket_id, **rule})
    assert answer.status == 201, answer.body


def test_create_read_update_with_defaults(admin, origin):
    made = add_bucket(admin, origin.url.upper().replace("HTTP://", "http://") + "/Base/")
    assert made["type"] == "http" and made["url"] == f"{origin.url}/Base"
    assert (made["host_header"], made["tls_verify"], made["connect_timeout"], made["read_timeout"]) == \
        ("origin", True, 5, 30)
    assert "secret_key_set" not in made
    etag = admin.get(f"/api/buckets/{made['id']}").headers["etag"]
    changed = admin.put(f"/api/buckets/{made['id']}", {"host_header": "WWW.Example.TEST", "read_timeout": 90},
                        headers={"If-Match": etag})
    assert changed.status == 200, changed.body
    assert changed.json["host_header"] == "www.example.test" and changed.json["read_timeout"] == 90
    listed = admin.get("/api/buckets").json["buckets"]
    assert [b["url"] for b in listed] == [f"{origin.url}/Base"]


@pytest.mark.parametrize("fields, field, words", [
    ({"url": "ftp://example.test/"}, "url", "http:// or https://"),
    ({"url": "http://example.test/a?x=1"}, "url", "query"),
    ({"url": "http://example.test/a#top"}, "url", "fragment"),
    ({"url": "http://user:pw@example.test/"}, "url", "credentials"),
    ({"url": "http://example.test/a/../b"}, "url", ".."),
    ({"url": "http://example.test/a b"}, "url", "spaces"),
    ({"url": "http://exa mple.test/"}, "url", "host"),
    ({"url": "http://169.254.169.254/latest"}, "url", "link-local"),
    ({"url": "http://[fe80::1]/"}, "url", "link-local"),
    ({"url": "http://100.100.100.200/"}, "url", "metadata"),
    ({"url": "http://example.test", "host_header": "bad host!"}, "host_header", "host name"),
    ({"url": "http://example.test", "tls_verify": "yes"}, "tls_verify", ""),
    ({"url": "http://example.test", "connect_timeout": 0}, "connect_timeout", ""),
    ({"url": "http://example.test", "read_timeout": 3601}, "read_timeout", ""),
    ({"url": "http://example.test", "endpoint": "http://s3.example.test"}, "endpoint", "not a field of http"),
    ({}, "url", ""),
])
def test_bad_definitions_are_refused_and_change_nothing(admin, fields, field, words):
    answer = admin.post("/api/buckets", {"name": "bad", "type": "http", **fields})
    assert answer.status == 400, answer.body
    error = answer.json["error"]
    assert error["field"] == field and words in error["message"], error
    assert admin.get("/api/buckets").json["buckets"] == []


def test_the_node_itself_is_refused_at_save(node, admin):
    for url in (f"http://127.0.0.1:{node.admin_port}/", f"http://127.0.0.1:{node.public_port}",
                f"http://localhost:{node.public_port}/x"):
        answer = admin.post("/api/buckets", {"name": "loop", "type": "http", "url": url})
        assert answer.status == 400 and answer.json["error"]["field"] == "url", (url, answer.body)
    checked = admin.post("/api/buckets/check", {"type": "http", "url": f"http://127.0.0.1:{node.public_port}"}).json
    assert checked["ok"] is False and [s["name"] for s in checked["steps"]] == ["resolve"]
    assert "loop" in checked["steps"][0]["detail"] and checked["steps"][0]["code"] == "refused_address"
    assert admin.get("/api/buckets").json["buckets"] == []


def test_check_and_test_against_the_origin(admin, origin):
    origin.script("/base/", b"home", headers={"Server": "scripted"})
    origin.script("/base/img/a.png", b"\x89PNG" + b"0" * 100, headers={"Content-Type": "image/png"}, etag='"p1"')
    made = add_bucket(admin, origin.url + "/base")
    report = admin.post("/api/buckets/check", {"id": made["id"]}).json
    assert report["ok"] is True, report
    assert [s["name"] for s in report["steps"]] == ["resolve", "connect", "request"]
    assert "HEAD /base/ answered 200" in report["steps"][2]["detail"]
    assert admin.get(f"/api/buckets/{made['id']}").json["last_check"]["ok"] is True
    tested = admin.post("/api/buckets/test", {"id": made["id"], "key": "img/a.png"}).json
    assert (tested["ok"], tested["status"], tested["size"], tested["etag"]) == (True, 200, 104, '"p1"')
    assert tested["content_type"] == "image/png" and tested["first_bytes"].startswith("iVBORz")
    missing = admin.post("/api/buckets/test", {"id": made["id"], "key": "nothing"}).json
    assert missing["ok"] is False and missing["status"] == 404
    origin.stop()
    down = admin.post("/api/buckets/check", {"id": made["id"]}).json
    assert down["ok"] is False and down["steps"][-1]["name"] == "connect"
    assert "refused" in down["steps"][-1]["detail"]


def test_https_origin_with_a_self_signed_certificate(admin, tmp_path):
    cert, key = certgen.make_leaf(["origin.example.test"], ips=["127.0.0.1"])
    (tmp_path / "c.pem").write_text(certgen.cert_pem(cert))
    (tmp_path / "k.pem").write_text(certgen.key_pem(key))
    with OriginServer(tls=(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))) as origin:
        origin.script("/", b"secure")
        origin.script("/f.txt", b"secure file")
        verified = admin.post("/api/buckets/check", {"type": "http", "url": origin.url}).json
        assert verified["ok"] is False and verified["steps"][-1]["name"] == "tls"
        detail = verified["steps"][-1]["detail"]
        assert "not trusted" in detail and "self-signed" in detail and "origin.example.test" in detail
        assert "tls_verify false" in detail
        unverified = admin.post("/api/buckets/check", {"type": "http", "url": origin.url, "tls_verify": False}).json
        assert unverified["ok"] is True, unverified
        assert "NOT verified" in unverified["steps"][2]["detail"] and "expires" in unverified["steps"][2]["detail"]
        tested = admin.post("/api/buckets/test", {"type": "http", "url": origin.url, "key": "f.txt"}).json
        assert tested["ok"] is False and tested["error"]["code"] == "tls"
        tested = admin.post("/api/buckets/test", {"type": "http", "url": origin.url, "tls_verify": False,
                                                  "key": "f.txt"}).json
        assert tested["ok"] is True and tested["size"] == 11


def test_serving_reuses_one_origin_connection(node, admin, origin):
    origin.script("/files/*", b"y" * 10_000, headers={"Content-Type": "text/css", "X-Origin": "1"}, etag='"c"')
    serve(admin, add_bucket(admin, origin.url + "/files")["id"])
    public = node.client("public", host=HOST)
    for n in range(5):
        got = public.get(f"/app{n}.css")
        assert got.status == 200 and got.body == b"y" * 10_000 and got.headers["content-type"] == "text/css"
    again = public.get("/app0.css")
    assert again.headers["x-cache"] == "HIT"
    head = public.request("HEAD", "/app9.css")
    assert head.status == 200 and head.headers["content-length"] == "10000"
    assert [s.target for s in origin.seen] == [f"/files/app{n}.css" for n in (0, 1, 2, 3, 4, 9)]
    assert all(s.headers["host"] == f"127.0.0.1:{origin.port}" for s in origin.seen)
    assert origin.connections == 1   # every miss went over one kept-alive connection
    origin.script("/files/gone.css", b"", status=404)
    assert public.get("/gone.css").status == 404
    origin.script("/files/broken.css", b"oops", status=500)
    assert public.get("/broken.css").status == 502


def test_host_header_client_reaches_the_origin_on_the_content_path(node, admin, origin):
    """host_header "client" on a rule in cache_mode "override": the origin sees the visitor's Host,
    not the url's."""
    origin.script("/files/*", b"z" * 100)
    serve(admin, add_bucket(admin, origin.url + "/files", host_header="client")["id"])
    got = node.client("public", host=HOST).get("/a.txt")
    assert got.status == 200 and got.body == b"z" * 100
    assert [(s.target, s.headers["host"]) for s in origin.seen] == [("/files/a.txt", HOST)]


def test_a_trickling_origin_is_served_whole(node, admin, origin):
    size = 5 * 1024 * 1024
    origin.script("/big.bin", bytes(range(256)) * (size // 256), rate=size / 12)
    serve(admin, add_bucket(admin, origin.url, read_timeout=5)["id"])
    started = time.monotonic()
    got = node.client("public", host=HOST).request("GET", "/big.bin", timeout=60)
    took = time.monotonic() - started
    assert got.status == 200 and len(got.body) == size and got.body == bytes(range(256)) * (size // 256)
    assert took >= 11, took   # the origin took its 12 s: nothing was cut, nothing cached before


def _fetch(port, path, results, source="127.0.0.1"):
    """GET path, appending (status or error, seconds); `source` is the client's own loopback address
    (the public port holds at most 64 connections per client address)."""
    started = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60, source_address=(source, 0))
        conn.request("GET", path, headers={"Host": HOST})
        answer = conn.getresponse()
        answer.read()
        results.append((answer.status, time.monotonic() - started))
    except OSError as exc:
        results.append((str(exc), time.monotonic() - started))


@pytest.mark.daemon_process
def test_a_dead_origin_answers_502_quickly(node, admin):
    serve(admin, add_bucket(admin, f"http://127.0.0.1:{free_port()}")["id"])
    results: list = []
    threads = [threading.Thread(target=_fetch, args=(node.public_port, f"/k{n}", results)) for n in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted({status for status, _ in results}) == [502]
    assert max(took for _, took in results) < 5, results


@pytest.mark.daemon_process
def test_a_hanging_origin_holds_only_its_share(node, admin, origin):
    """An origin that accepts and never answers: 32 requests wait their read timeout, 32 more wait for a
    connection, the rest are refused at once; another origin is served meanwhile."""
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(1024)   # the kernel accepts; nobody ever reads or answers
    try:
        slow = add_bucket(admin, f"http://127.0.0.1:{hanging.getsockname()[1]}", name="hang",
                          read_timeout=4, connect_timeout=2)
        serve(admin, slow["id"])
        origin.script("/ok.txt", b"fine")
        fine = add_bucket(admin, origin.url, name="fine")
        assert admin.post("/api/rules", {"domain": HOST, "path": "/fine/", "bucket": fine["id"],
                                                 "cache_mode": "override"}).status == 201
        results: list = []
        threads = [threading.Thread(target=_fetch, args=(node.public_port, f"/h{n}", results, f"127.0.1.{1 + n % 10}"))
                   for n in range(80)]   # 8 from each of ten addresses: all served at once (max_requests_per_client)
        for t in threads:
            t.start()
        time.sleep(1)
        meanwhile = node.client("public", host=HOST).get("/fine/ok.txt")
        assert meanwhile.status == 200 and meanwhile.body == b"fine"
        quick = [r for r in results if r[1] < 1.5]
        assert len(quick) >= 80 - 64 - 2 and {s for s, _ in quick} == {502}, results
        for t in threads:
            t.join(30)
        statuses = sorted(s for s, _ in results)
        assert statuses.count(504) == 32 and statuses.count(502) == 48, statuses
        assert max(took for _, took in results) < 8, results
    finally:
        hanging.close()


@pytest.fixture
def dns_node(request, tmp_path):
    """A node resolving names through pebble-challtestsrv, where the test points origin.example.test."""
    dns = ChallTestSrv(str(tmp_path), default_ipv4="", default_ipv6="")
    (tmp_path / "n").mkdir()
    instance = node_class(request)(str(tmp_path / "n"), env={"CONTENTNODE_DNS_RESOLVER": dns.dns_address}).start()
    client = instance.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    yield instance, client, dns
    instance.close()
    dns.stop()


def point(dns, address):
    """origin.example.test now resolves to `address` alone (challtestsrv adds to a name's records)."""
    dns.manage("/clear-a", {"host": "origin.example.test"})
    dns.add_a("origin.example.test", [address])


def test_a_name_re_pointed_at_the_node_or_metadata_is_refused_at_connect(dns_node, origin):
    node, admin, dns = dns_node
    origin.script("/x.txt", b"x")
    point(dns, "127.0.0.1")
    served = add_bucket(admin, f"http://origin.example.test:{origin.port}", name="served")
    serve(admin, served["id"])
    public = node.client("public", host=HOST)
    assert public.get("/x.txt").status == 200
    # saved while the name points elsewhere (a private address: allowed), then re-pointed at the node
    point(dns, "10.255.255.1")
    looping = add_bucket(admin, f"http://origin.example.test:{node.public_port}", name="looping")
    point(dns, "127.0.0.1")
    tested = admin.post("/api/buckets/test", {"id": looping["id"], "key": "x.txt"}).json
    assert tested["ok"] is False and tested["error"]["code"] == "refused_address", tested
    assert "loop" in tested["error"]["message"]
    report = admin.post("/api/buckets/check", {"id": looping["id"]}).json
    assert report["steps"][0]["name"] == "resolve" and not report["steps"][0]["ok"]
    # the served name re-pointed at a metadata address: the next connect is refused, 502
    point(dns, "169.254.169.254")
    origin.stop()   # drops the kept connection: the next request connects again
    origin.start()
    got = public.get("/other.txt")
    assert got.status == 502
    assert [s.target for s in origin.seen] == ["/x.txt"]
    assert "link-local" in node.log()


def test_a_backup_carries_http_buckets_onto_another_node(request, admin, origin, tmp_path):
    """Backups and fleet bundles pass the same restore checks: an http bucket (no secret) restores whole."""
    made = add_bucket(admin, origin.url + "/app", host_header="client", tls_verify=False, read_timeout=120)
    plain = admin.post("/api/backup/export", {}).json
    (tmp_path / "other").mkdir()
    other = node_class(request)(str(tmp_path / "other")).start()
    try:
        client = other.client()
        assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        restored = client.post("/api/backup/restore", {"backup": plain})
        assert restored.status == 200, restored.body
        again = client.get(f"/api/buckets/{made['id']}").json
        same = [k for k in made if k not in ("updated_at", "revision")]
        assert {k: again[k] for k in same} == {k: made[k] for k in same}
        assert client.post("/api/buckets/check", {"id": made["id"]}).json["ok"] is True
    finally:
        other.close()


def test_two_public_workers_each_keep_their_origin_connection(tmp_path, origin):
    origin.script("/w/*", b"w" * 2000)
    (tmp_path / "w").mkdir()
    workers = Node(str(tmp_path / "w"), env={"CONTENTNODE_PUBLIC_WORKERS": "2"}).start()
    try:
        admin = workers.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        serve(admin, add_bucket(admin, origin.url + "/w")["id"])
        public = workers.client("public", host=HOST)
        for n in range(30):
            got = public.get(f"/k{n}.bin")
            assert got.status == 200 and got.body == b"w" * 2000
        assert len(origin.requests_for("/w/k0.bin")) == 1 and len(origin.seen) == 30
        assert origin.connections <= 3   # one kept-alive connection per serving process, reused
    finally:
        workers.close()
