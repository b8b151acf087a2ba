"""GET /metrics parses with the reference Prometheus parser, its counters move, the series
alerts need exist from the start, and promtool finds nothing to lint."""

import bisect
import collections
import datetime
import os
import random
import threading
import platform
import subprocess
import time
import tracemalloc

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contentnode import __version__
from contentnode.core.metrics import HOST_LABELS, MAX_ANSWERED, METHODS, NodeMetrics, soonest_per_host
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.peers.check import PROMTOOL

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed


def scrape(node):
    r = node.client().get("/metrics")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(r.body.decode())}


def sample(families, name, **labels):
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0


def settled(node, name, **labels):
    """A scrape once the request just answered is counted (it is counted after its answer is sent)."""
    for _ in range(100):
        families = scrape(node)
        if sample(families, name, **labels):
            return families
        time.sleep(0.02)
    return families


def test_metrics_parse_and_move(node, admin):
    node.client().login(ADMIN_USER, "wrong password here")
    node.client().login(ADMIN_USER, ADMIN_PASSWORD)
    node.client("public").get("/.well-known/service/check?nonce=abcdefghijklmnopqrstu")
    before = settled(node, "contentnode_http_requests_total", port="public", method="GET", status="200")
    assert sample(before, "contentnode_logins_total", result="failure") == 1
    assert sample(before, "contentnode_logins_total", result="success") == 1
    assert sample(before, "contentnode_http_requests_total", port="public", method="GET", status="200") == 1
    assert sample(before, "process_resident_memory_bytes") > 1_000_000
    assert sample(before, "process_start_time_seconds") > 1_600_000_000
    for _ in range(3):
        node.client().get("/healthz")
    get200 = dict(port="admin", method="GET", status="200")
    wanted = sample(before, "contentnode_http_requests_total", **get200) + 3
    for _ in range(100):
        after = scrape(node)
        if sample(after, "contentnode_http_requests_total", **get200) >= wanted:
            break
        time.sleep(0.02)
    assert sample(after, "contentnode_http_requests_total", **get200) >= wanted
    assert sample(after, "contentnode_http_request_duration_seconds_count", port="admin") > 3


def test_series_alerts_need_are_there_from_the_start(node):
    families = scrape(node)
    assert {s.labels["result"]: s.value for s in families["contentnode_logins"].samples
            if s.name == "contentnode_logins_total"} == {"success": 0, "failure": 0, "locked": 0}
    errors = [(s.labels, s.value) for s in families["contentnode_traffic_errors"].samples]
    assert errors == [({"port": "public", "domain": "other", "class": "4xx"}, 0),
                      ({"port": "public", "domain": "other", "class": "5xx"}, 0)]
    for name in ("requests", "sent_bytes", "cache_hits", "cache_misses"):
        family = families[f"contentnode_traffic_{name}"]
        assert family.type == "counter"
        assert [(s.name, s.labels, s.value) for s in family.samples] == \
            [(f"contentnode_traffic_{name}_total", {"port": "public", "domain": "other"}, 0)]


def test_build_info(node):
    (info,) = scrape(node)["contentnode_build_info"].samples
    assert info.labels == {"version": __version__, "python": platform.python_version()} and info.value == 1


def test_certificate_expiry_per_host(node, admin):
    ca = make_ca()
    ends = {}
    for host, days in (("b.example.com", 30), ("a.example.com", 10)):
        assert admin.post("/api/domains", {"host": host}).status == 201
        not_after = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days)
        cert, key = make_leaf([host], ca[0], ca[1], not_after=not_after)
        answer = admin.post("/api/certs/upload", {"host": host, "cert_pem": cert_pem(cert) + cert_pem(ca[0]),
                                                  "key_pem": key_pem(key)})
        assert answer.status == 200, answer.body
        ends[host] = cert.not_valid_after_utc.timestamp()
    samples = scrape(node)["contentnode_certificate_expiry_timestamp_seconds"].samples
    assert [(s.labels["host"], s.value) for s in samples] == \
        [("a.example.com", ends["a.example.com"]), ("b.example.com", ends["b.example.com"])]


def test_the_host_label_is_bounded():
    rows = soonest_per_host([(f"h{i:03d}.example", 1000 + i) for i in range(HOST_LABELS + 5)][::-1])
    assert len(rows) == HOST_LABELS + 1
    assert rows[0] == (("h000.example",), 1000) and rows[-1] == (("other",), 1000 + HOST_LABELS)


def test_answers_appended_from_many_threads_are_all_counted():
    """Answers are appended without a lock and counted when read or past MAX_ANSWERED
    (core/metrics.py observe_request): from four threads at once, past the bound several times,
    with a scrape and a worker's take meanwhile, every answer is counted once, in the series a
    count one at a time makes."""
    buckets = NodeMetrics(0, "t").duration.buckets
    rng = random.Random(30)
    answers = [[(rng.choice(("public", "admin")), rng.choice(("GET", "HEAD", "BREW", "GET")),
                 rng.choice((200, 304, 404, 503)), rng.random() ** 4 * 3) for _ in range(MAX_ANSWERED + 1500)]
               for _ in range(4)]
    worker, daemon = NodeMetrics(0, "t"), NodeMetrics(0, "t")

    def answer(rows):
        for n, row in enumerate(rows):
            worker.observe_request(*row)
            if n % 3 == 0:
                worker.observe_again()
            if n == 2000:
                daemon.merge_requests(worker.take_requests())
    threads = [threading.Thread(target=answer, args=(rows,)) for rows in answers]
    for thread in threads:
        thread.start()
    worker.render()
    for thread in threads:
        thread.join()
    daemon.merge_requests(worker.take_requests())
    families = {f.name: f for f in text_string_to_metric_families(daemon.render())}

    rows = [row for rows in answers for row in rows]
    requests = collections.Counter((p, m if m in METHODS else "other", str(s)) for p, m, s, _ in rows)
    assert {(s.labels["port"], s.labels["method"], s.labels["status"]): s.value
            for s in families["contentnode_http_requests"].samples} == requests
    for port in ("public", "admin"):
        seconds = [d for p, _, _, d in rows if p == port]
        per_bucket = collections.Counter(bisect.bisect_left(buckets, d) for d in seconds)
        cumulated = [sum(per_bucket[i] for i in range(n + 1)) for n in range(len(buckets))]
        got = {s.name: s for s in families["contentnode_http_request_duration_seconds"].samples
               if s.labels["port"] == port and s.name.endswith(("_count", "_sum"))}
        assert [s.value for s in families["contentnode_http_request_duration_seconds"].samples
                if s.labels["port"] == port and s.name.endswith("_bucket")] == cumulated
        assert got["contentnode_http_request_duration_seconds_count"].value == len(seconds)
        assert got["contentnode_http_request_duration_seconds_sum"].value == pytest.approx(sum(seconds))
    assert sample(families, "contentnode_public_prepared_answers_total") == sum(
        len(range(0, len(rows), 3)) for rows in answers)
    for _ in range(3):   # a scrape counts what was appended before it
        daemon.observe_request("admin", "GET", 200, 0.01)
    families = {f.name: f for f in text_string_to_metric_families(daemon.render())}
    assert sample(families, "contentnode_http_requests_total", port="admin", method="GET", status="200") == \
        requests["admin", "GET", "200"] + 3


def test_answers_waiting_to_be_counted_hold_no_client_method():
    """A method is any token up to the head's 64 KiB, and an anonymous client picks it: the
    answers appended until the next count (up to MAX_ANSWERED) keep its label, never the
    client's string (4,096 methods of 60 KB held 240 MB until a scrape)."""
    metrics = NodeMetrics(0, "t")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1000):
            metrics.observe_request("public", f"M{n:05d}" + "A" * 60000, 405, 0.001)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 1 << 20, f"{held} bytes held by 1,000 answers waiting to be counted"
    families = {f.name: f for f in text_string_to_metric_families(metrics.render())}
    assert sample(families, "contentnode_http_requests_total", port="public", method="other", status="405") == 1000


def test_promtool_finds_nothing_to_lint(node, admin):
    """promtool comes with Debian's prometheus, which CI installs (tests/peers/check.py says why
    `make test` does not): without it this test is skipped, with the reason, except under CI."""
    if not os.access(PROMTOOL, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{PROMTOOL} missing under CI: apt-get install -y prometheus")
        pytest.skip(f"{PROMTOOL} missing: apt-get install -y prometheus (CI installs it)")
    node.client().login(ADMIN_USER, "wrong password here")
    node.client("public").get("/nothing-here")
    body = node.client().get("/metrics").body
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, b"")
