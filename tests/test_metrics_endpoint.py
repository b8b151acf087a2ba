"""GET /metrics parses with the reference Prometheus parser and its counters move."""

import time

from prometheus_client.parser import text_string_to_metric_families

from tests.node import ADMIN_PASSWORD, ADMIN_USER


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
