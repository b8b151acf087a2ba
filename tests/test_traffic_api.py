"""Traffic metrics over the API and /metrics, and their survival across a restart."""

import re

import pytest

from tests.content_setup import Site
from tests.inprocess import node_class

pytestmark = pytest.mark.in_process  # HTTP to the App and SeaweedFS; the restart runs a daemon process


@pytest.fixture
def site(request, tmp_path, seaweed):
    instance = Site(str(tmp_path), seaweed, host="traffic.example.test", node_class=node_class(request))
    instance.add_rule("/", prefix="t/", cache_ttl=300)
    instance.add_domain("second.example.test")
    yield instance
    instance.close()


def totals(answer):
    keys = ("requests", "bytes_out", "cache_hits", "cache_misses", "errors_4xx", "errors_5xx")
    return {k: sum(p[k] for p in answer["points"]) for k in keys}


def prometheus(site, name, domain, extra=""):
    text = site.node.client().get("/metrics").body.decode()
    found = re.search(rf'^{name}{{port="public",domain="{re.escape(domain)}"{extra}}} (\d+)$', text, re.M)
    return int(found.group(1)) if found else 0


def test_metrics_ranges_and_bad_range(site):
    for name, step, count in (("1h", 60, 60), ("24h", 300, 288), ("7d", 3600, 168)):
        answer = site.admin.get(f"/api/metrics?range={name}").json
        assert answer["range"] == name and answer["step_seconds"] == step
        assert len(answer["points"]) == count
        assert answer["points"][-1]["t"].endswith("Z")
    for bad in ("/api/metrics", "/api/metrics?range=2d", "/api/metrics?range="):
        response = site.admin.get(bad)
        assert response.status == 400 and response.json["error"]["field"] == "range"
    assert site.node.client().get("/api/metrics?range=1h").status == 401


@pytest.mark.daemon_process
def test_points_and_prometheus_counters_move_and_survive_restart(site):
    site.put("t/a.txt", b"a" * 1000)
    before = totals(site.admin.get("/api/metrics?range=1h").json)
    answers = [site.get("/a.txt"), site.get("/a.txt"), site.get("/missing"),     # miss, hit, 404
               site.get("/a.txt", host="second.example.test")]                  # no rule there
    with site.seaweed.stopped():
        answers.append(site.get("/down.txt"))
    assert [a.status for a in answers] == [200, 200, 404, 404, 502]
    after = totals(site.admin.get("/api/metrics?range=1h").json)
    delta = {k: after[k] - before[k] for k in after}
    assert delta["requests"] == 5 and delta["bytes_out"] == sum(len(a.body) for a in answers)
    assert delta["cache_hits"] == 1 and delta["cache_misses"] == 1
    assert delta["errors_4xx"] == 2 and delta["errors_5xx"] == 1
    one_domain = totals(site.admin.get("/api/metrics?range=24h&domain=traffic.example.test").json)
    assert one_domain["requests"] == 4
    assert prometheus(site, "contentnode_traffic_requests_total", "traffic.example.test") == 4
    assert prometheus(site, "contentnode_traffic_sent_bytes_total", "traffic.example.test") == \
        sum(len(a.body) for a in answers[:3] + answers[4:])
    assert prometheus(site, "contentnode_traffic_requests_total", "second.example.test") == 1
    panel = site.admin.get("/api/panel").json["metrics"]
    assert panel["last_24h"]["requests"] == after["requests"] and panel["cache"]["entries"] == 1

    site.node.restart()
    site.admin.login("admin", "correct horse battery staple")
    kept = site.admin.get("/api/metrics?range=1h").json
    assert totals(kept) == after
    assert totals(site.admin.get("/api/metrics?range=7d").json)["bytes_out"] == after["bytes_out"]
    again = site.get("/a.txt")
    assert again.status == 200 and again.headers["x-cache"] == "HIT"   # the cache survived too


def test_unknown_hosts_count_under_other(site):
    assert site.get("/x", host="nobody.example.test").status == 404
    assert prometheus(site, "contentnode_traffic_errors_total", "other", ',class="4xx"') == 1
    text = site.node.client().get("/metrics").body.decode()
    assert "nobody.example.test" not in text
