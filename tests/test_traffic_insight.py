"""Traffic insight (GET /api/traffic/top and /tail) against the real daemon with two public workers:
exact answers for a known mix of requests from several 127.0.0.x clients, the client_addresses
setting, never a query string, the hourly save (shortened by traffic_save_seconds), bad parameters."""

import http.client
import json
import os
import shutil
import time

import pytest

from contentnode.core.traffic_top import TrafficTop
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.two_workers import TwoWorkerNode, both_serving, wait_until

pytestmark = pytest.mark.daemon_process

HOST = "insight.example.test"
OTHER = "second.example.test"
SAVE_SECONDS = "0.5"   # traffic_save_seconds: the summaries are saved this often, not every hour


def start_site(workdir, host=HOST):
    """A two-worker node serving a folder bucket under `host` (and OTHER with the same rule)."""
    node = TwoWorkerNode(workdir, env={"CONTENTNODE_TRAFFIC_SAVE_SECONDS": SAVE_SECONDS}).start()
    admin = node.client()
    assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    folder = os.path.join(node.data_dir, "sites", "insight")
    os.makedirs(folder)
    for name, size in (("a.txt", 100), ("b.txt", 1000), ("hot.txt", 10)):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"x" * size)
    bucket = admin.post("/api/buckets", {"name": "insight", "type": "folder", "path": folder})
    assert bucket.status == 201, bucket.body
    for domain in (host, OTHER):
        assert admin.post("/api/domains", {"host": domain}).status == 201
        made = admin.post("/api/rules", {"domain": domain, "path": "/", "bucket": bucket.json["id"], "cache_ttl": 300})
        assert made.status == 201, made.body
    assert both_serving(node)
    return node, admin


@pytest.fixture
def site(tmp_path):
    node, admin = start_site(str(tmp_path))
    yield node, admin
    node.close()


def get(node, path, client="127.0.0.2", host=HOST, referer=None):
    """One request on a connection of its own from source address `client`: (status, body length)."""
    conn = http.client.HTTPConnection("127.0.0.1", node.public_port, timeout=30, source_address=(client, 0))
    try:
        conn.request("GET", path, headers={"Host": host, **({"Referer": referer} if referer else {})})
        answer = conn.getresponse()
        return answer.status, len(answer.read())
    finally:
        conn.close()


def top(admin, by, range_name="1h", domain=HOST):
    answer = admin.get(f"/api/traffic/top?domain={domain}&range={range_name}&by={by}")
    assert answer.status == 200, answer.body
    return {row["value"]: (row["requests"], row["bytes"]) for row in answer.json["top"]}


def tail(admin, query=""):
    answer = admin.get(f"/api/traffic/tail?{query}")
    assert answer.status == 200, answer.body
    return answer.json


MIX = [  # (path, client, referer, times)
    ("/a.txt", "127.0.0.2", None, 12),
    ("/b.txt?secret=s3cr3t&sig=1", "127.0.0.3", "https://Ref.Example:8443/page?token=s3cr3t", 5),
    ("/missing.txt?secret=s3cr3t", "127.0.0.4", None, 3),
]


def requests_saved(node) -> int:
    """The requests of HOST the last save of the summaries holds, read as the next start reads them
    (a save is written only when something was counted since the one before)."""
    saved = os.path.join(node.data_dir, "traffic_top.json")
    if not os.path.exists(saved):
        return 0
    copy = os.path.join(node.data_dir, "traffic_top.copy.json")
    shutil.copyfile(saved, copy)
    top_of_file = TrafficTop(copy, time.time, lambda: "truncated").top(HOST, "1h", "path", "truncated")
    return sum(row["requests"] for row in top_of_file["top"])


def send_mix(node):
    """The mix, in order; {path: [(status, body length)]}."""
    sent: dict = {}
    for path, client, referer, times in MIX:
        for _ in range(times):
            sent.setdefault(path.split("?")[0], []).append(get(node, path, client, referer=referer))
    return sent


def test_top_and_tail_are_exact_for_a_known_mix(site):
    node, admin = site
    assert admin.put("/api/settings", {"client_addresses": "full"}).json["client_addresses"] == "full"
    sent = send_mix(node)
    assert [s for s, _ in sent["/a.txt"]] == [200] * 12 and [s for s, _ in sent["/missing.txt"]] == [404] * 3
    assert get(node, "/a.txt", host=OTHER)[0] == 200          # another domain: not in this domain's answers
    missing_bytes = sum(n for _, n in sent["/missing.txt"])
    # each worker reports every quarter second: wait for all 20, not for the last path sent
    assert wait_until(lambda: sum(r for r, _ in top(admin, "path").values()) == 20, 10)
    assert wait_until(lambda: top(admin, "path", domain=OTHER) != {}, 10)   # the other domain's worker may report later
    assert top(admin, "path") == {"/a.txt": (12, 1200), "/b.txt": (5, 5000), "/missing.txt": (3, missing_bytes)}
    assert top(admin, "client") == {"127.0.0.2": (12, 1200), "127.0.0.3": (5, 5000), "127.0.0.4": (3, missing_bytes)}
    assert top(admin, "referer") == {"ref.example": (5, 5000), "": (15, 1200 + missing_bytes)}
    assert top(admin, "status") == {"200": (17, 6200), "404": (3, missing_bytes)}
    assert top(admin, "cache") == {"miss": (2, 1100), "hit": (15, 5100), "none": (3, missing_bytes)}
    assert top(admin, "country") == {}                        # no country database on this node
    for range_name in ("24h", "7d"):
        assert top(admin, "path", range_name) == top(admin, "path")
    assert top(admin, "path", domain=OTHER) == {"/a.txt": (1, 100)}
    whole = admin.get(f"/api/traffic/top?domain={HOST}&range=1h&by=path").json
    assert whole["approximate"] is False and whole["by"] == "path" and whole["range"] == "1h"

    answer = tail(admin, f"domain={HOST}")
    entries = answer["requests"]
    assert len(entries) == 20 and answer["next_after"] >= entries[-1]["id"]
    assert [e["id"] for e in entries] == sorted(e["id"] for e in entries)
    assert sorted((e["path"], e["client"], e["referer"], e["status"], e["bytes"]) for e in entries) == sorted(
        [("/a.txt", "127.0.0.2", "", 200, 100)] * 12 + [("/b.txt", "127.0.0.3", "ref.example", 200, 1000)] * 5
        + [("/missing.txt", "127.0.0.4", "", 404, missing_bytes // 3)] * 3)
    assert {e["method"] for e in entries} == {"GET"} and all(e["time"].endswith("Z") for e in entries)
    # in the order the workers reported (each every quarter second), so the first miss may come later
    assert sorted(e["cache"] for e in entries if e["path"] == "/a.txt") == ["hit"] * 11 + ["miss"]
    assert [e["status"] for e in tail(admin, f"domain={HOST}&status=404")["requests"]] == [404] * 3
    assert len(tail(admin, f"domain={HOST}&status=2xx")["requests"]) == 17
    assert len(tail(admin)["requests"]) == 21                    # every domain
    cursor = answer["next_after"]
    assert tail(admin, f"after={cursor}")["requests"] == []
    get(node, "/b.txt?secret=s3cr3t", "127.0.0.5")
    assert wait_until(lambda: len(tail(admin, f"after={cursor}")["requests"]) == 1, 10)
    assert tail(admin, f"after={cursor}")["requests"][0]["client"] == "127.0.0.5"

    # never a query string: not in an answer, not in the saved summaries
    shown = json.dumps([tail(admin), *(admin.get(f"/api/traffic/top?domain={HOST}&by={by}").json
                                       for by in ("path", "client", "referer"))])
    assert "s3cr3t" not in shown and "?" not in shown and "token" not in shown
    saved = os.path.join(node.data_dir, "traffic_top.json")
    assert wait_until(lambda: requests_saved(node) == 21, 10)   # a save holding all 21, the query string's too
    assert b"s3cr3t" not in open(saved, "rb").read()


def test_client_addresses_truncated_by_default_and_off(site):
    node, admin = site
    assert admin.get("/api/settings").json["client_addresses"] == "truncated"
    send_mix(node)
    assert wait_until(lambda: sum(r for r, _ in top(admin, "path").values()) == 20, 10)
    assert list(top(admin, "client")) == ["127.0.0.0/24"] and top(admin, "client")["127.0.0.0/24"][0] == 20
    assert {e["client"] for e in tail(admin)["requests"]} == {"127.0.0.0/24"}
    saved = os.path.join(node.data_dir, "traffic_top.json")
    assert wait_until(lambda: requests_saved(node) == 20, 10)   # a save holding all 20 (an earlier one may not)
    assert b"127.0.0.2" not in open(saved, "rb").read()      # the whole address was never kept

    assert admin.put("/api/settings", {"client_addresses": "off"}).status == 200
    assert top(admin, "client") == {}                         # applied to what was kept, too
    assert {e["client"] for e in tail(admin)["requests"]} == {None}
    get(node, "/a.txt", "127.0.0.9")
    assert wait_until(lambda: top(admin, "path")["/a.txt"][0] == 13, 10)
    assert admin.put("/api/settings", {"client_addresses": "full"}).status == 200
    assert top(admin, "client") == {"127.0.0.0/24": (20, top(admin, "status")["200"][1] - 100
                                                     + top(admin, "status")["404"][1])}   # 127.0.0.9: never kept
    bad = admin.put("/api/settings", {"client_addresses": "half"})
    assert bad.status == 400 and bad.json["error"]["field"] == "client_addresses"
    assert admin.get("/api/settings").json["client_addresses"] == "full"


def test_bad_parameters_are_400_naming_the_field(site):
    node, admin = site
    for query, field in (("range=1h&by=path", "domain"), (f"domain={HOST}&range=2d", "range"),
                         (f"domain={HOST}&by=url", "by"), ("domain=-bad-", "domain"),
                         (f"domain={HOST}&limit=5", "limit")):
        answer = admin.get(f"/api/traffic/top?{query}")
        assert answer.status == 400 and answer.json["error"]["code"] == "invalid", query
        assert answer.json["error"]["field"] == field, query
    for query, field in (("status=abc", "status"), ("status=600", "status"), ("status=4x", "status"),
                         ("after=-1", "after"), ("after=x", "after"), ("domain=a..b", "domain")):
        answer = admin.get(f"/api/traffic/tail?{query}")
        assert answer.status == 400 and answer.json["error"]["field"] == field, query
    assert node.client().get(f"/api/traffic/top?domain={HOST}").status == 401
    assert node.client().get("/api/traffic/tail").status == 401


def test_counts_survive_a_kill_after_a_save(site):
    node, admin = site
    send_mix(node)
    assert wait_until(lambda: sum(r for r, _ in top(admin, "path").values()) == 20, 10)
    before = {by: top(admin, by, "24h") for by in ("path", "status", "cache", "referer")}
    assert wait_until(lambda: requests_saved(node) == 20, 10)   # a save holding all 20 (an earlier one may not)
    node.kill()     # kill -9: what the last save wrote is what the next start reads
    node.start()
    admin.login(ADMIN_USER, ADMIN_PASSWORD)
    for range_name in ("1h", "24h", "7d"):
        assert {by: top(admin, by, range_name) for by in before} == before
