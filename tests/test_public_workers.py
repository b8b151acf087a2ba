"""public_workers = 2: the real daemon starts two public worker processes on its public socket.

What must hold across processes: configuration changes and purges reach every
worker, single flight (one origin GET for 50 concurrent misses spread over the
workers), one cache budget, exact traffic counters and /metrics, a dead worker
restarted, SIGTERM stopping all. Real SeaweedFS behind its counting front.
"""

import os
import re
import signal
import threading
import time

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.two_workers import TwoWorkerNode, alive, both_serving, live_workers, syscalls, wait_until

pytestmark = pytest.mark.daemon_process


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("workers")), seaweed, node_class=TwoWorkerNode)
    instance.add_rule("/w", prefix="w/", cache_ttl=3600)
    assert both_serving(instance.node)
    yield instance
    instance.close()


def parallel(count, fn, width=10):
    """fn(i) for i in range(count) on `width` threads at once; the results in order."""
    results = [None] * count
    barrier = threading.Barrier(width)

    def run(offset):
        barrier.wait(30)
        for i in range(offset, count, width):
            results[i] = fn(i)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(width)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_two_workers_start_and_both_serve(site):
    pids = live_workers(site.node)
    assert len(pids) == 2
    assert "public port served by 2 worker processes" in site.node.log()
    site.put("w/both.txt", b"both")
    before = {pid: syscalls(pid) for pid in pids}
    assert all(r.status == 200 for r in parallel(60, lambda i: site.get("/w/both.txt")))
    assert all(syscalls(pid) >= before[pid] + 5 for pid in pids), "a worker served (almost) nothing"


def test_each_worker_keeps_its_public_threads_to_its_own_cpu(site):
    allowed = sorted(os.sched_getaffinity(0))
    slots = dict((int(pid), int(slot)) for pid, slot in
                 re.findall(r"public worker (\d+) started \(slot (\d+)\)", site.node.log()))
    chosen = {}
    for pid in live_workers(site.node):
        pinned = {tuple(cpus) for cpus in _thread_cpus(pid) if cpus != allowed}
        if len(allowed) < 2:
            assert pinned == set()
            continue
        assert pinned == {(allowed[slots[pid] % len(allowed)],)}, (pid, pinned)
        chosen[pid] = pinned
    assert len(allowed) < 2 or len({c for p in chosen.values() for c in p}) == 2  # two workers, two CPUs


def test_rule_change_reaches_every_worker(site):
    site.put("late/a.txt", b"late rule")
    assert {r.status for r in parallel(20, lambda i: site.get("/late/a.txt"))} == {404}
    site.add_rule("/late", prefix="late/")
    started = time.monotonic()
    rounds = []  # how many of each round's answers were not 200

    def all_served():
        statuses = [r.status for r in parallel(20, lambda i: site.get("/late/a.txt"))]
        rounds.append(sum(1 for status in statuses if status != 200))
        return rounds[-1] == 0

    assert wait_until(all_served, 3), rounds
    assert time.monotonic() - started < 2.0
    assert all(r.status == 200 for r in parallel(60, lambda i: site.get("/late/a.txt")))


def test_purge_reaches_every_workers_memory(site):
    """Small bodies are held in each worker's memory after a hit: a purge through the admin API
    must drop them everywhere, and the next answers carry the new object."""
    site.put("w/hot.css", b"old " * 100)
    for _ in range(3):  # hits on both workers: the body is now in memory
        assert {r.body for r in parallel(40, lambda i: site.get("/w/hot.css"))} == {b"old " * 100}
    site.put("w/hot.css", b"new " * 100)
    assert {r.body for r in parallel(40, lambda i: site.get("/w/hot.css"))} == {b"old " * 100}
    response = site.admin.post("/api/purge", {"urls": [f"http://{site.host}/w/hot.css"]})
    assert response.status == 200, response.body
    bodies = [r.body for r in parallel(60, lambda i: site.get("/w/hot.css"))]
    assert set(bodies) == {b"new " * 100}
    assert site.origin_gets("w/hot.css") == 2


def test_purge_all_removes_what_either_worker_stored(site):
    for n in range(6):
        site.put(f"w/all-{n}.bin", bytes([n]) * 100_000)
    parallel(24, lambda i: site.get(f"/w/all-{i % 6}.bin"))
    stored = _cache_stats(site)
    assert stored["entries"] >= 6
    response = site.admin.post("/api/purge", {"all": True})
    assert response.status == 200, response.body
    after = _cache_stats(site)
    assert after["entries"] == 0 and after["bytes"] == 0, after
    assert all(r.headers.get("x-cache") == "MISS" for r in parallel(6, lambda i: site.get(f"/w/all-{i}.bin")))


def test_fifty_concurrent_misses_across_workers_make_one_origin_get(site):
    """Which worker accepts a connection is the kernel's choice, and on a busy machine one may
    take a whole burst: each round is a fresh object, and a round counts once the misses
    reached both workers. Every round, whoever served it, makes exactly one origin GET."""
    data = bytes(range(256)) * 8192                  # 2 MiB
    pids = live_workers(site.node)
    for round_ in range(6):
        key = f"w/flight-{round_}.bin"
        site.put(key, data)
        before = {pid: syscalls(pid) for pid in pids}
        results = parallel(50, lambda i: site.get("/" + key), width=50)
        assert all(r.status == 200 and r.body == data for r in results)
        assert site.origin_gets(key) == 1, round_
        if all(syscalls(pid) - before[pid] >= 5 for pid in pids):
            return
    raise AssertionError("in 6 rounds of 50 concurrent misses, none reached both workers")


def test_one_budget_across_workers(site):
    response = site.admin.put("/api/settings", {"cache_max_bytes": 1_000_000})
    assert response.status == 200, response.body
    try:
        for n in range(20):
            site.put(f"w/budget-{n}.bin", bytes([n]) * 150_000)
        parallel(40, lambda i: site.get(f"/w/budget-{i % 20}.bin"))
        folder = os.path.join(site.node.data_dir, "cache")
        # a fill renames its file into place just after its visitors got the last byte
        counted = []
        assert wait_until(lambda: counted.append((_entry_bytes(folder), _cache_stats(site)["bytes"]))
                          or counted[-1][0] == counted[-1][1], 3), counted
        assert counted[-1][0] <= 1_000_000
    finally:
        site.admin.put("/api/settings", {"cache_max_bytes": 256 * 1024 * 1024})


def test_the_cache_keeps_caching_at_its_cap_after_the_workers_restart(site):
    """One budget, one LRU order: entries stored by workers that were killed are evicted by the
    new workers' fills (before, each process evicted only what it had stored itself: at the cap
    the new workers streamed every object from the origin and cached nothing)."""
    response = site.admin.put("/api/settings", {"cache_max_bytes": 1_000_000})
    assert response.status == 200, response.body
    try:
        for n in range(8):
            site.put(f"w/full-{n}.bin", bytes([n]) * 150_000)
            assert site.get(f"/w/full-{n}.bin").status == 200
        assert _cache_stats(site)["bytes"] > 800_000
        victims = live_workers(site.node)
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        assert wait_until(lambda: len(set(live_workers(site.node)) - set(victims)) == 2, 10), site.node.log()
        for n in range(4):
            site.put(f"w/after-{n}.bin", bytes([n]) * 150_000)
            assert site.get(f"/w/after-{n}.bin").status == 200
            again = site.get(f"/w/after-{n}.bin")
            assert again.status == 200 and again.headers.get("x-cache") == "HIT", f"after-{n} was not kept"
        assert _entry_bytes(os.path.join(site.node.data_dir, "cache")) <= 1_000_000
    finally:
        site.admin.put("/api/settings", {"cache_max_bytes": 256 * 1024 * 1024})


def test_the_books_show_every_process_and_the_last_purge(site):
    """GET /api/cache: what the panel's Cache page shows, summed over the processes."""
    def live_slots():
        return sorted(p["slot"] for p in site.admin.get("/api/cache").json["processes"]
                      if p["role"] == "worker" and p["alive"])
    assert wait_until(lambda: live_slots() == [1, 2], 10), live_slots()   # restarted workers have attached
    before = site.admin.get("/api/cache").json
    for n in range(3):
        site.put(f"w/books-{n}.txt", b"x" * (1000 + n))
    for _ in range(4):
        for n in range(3):
            assert site.get(f"/w/books-{n}.txt").status == 200
    books = site.admin.get("/api/cache")
    assert books.status == 200, books.body
    after = books.json
    assert after["entries"] == before["entries"] + 3 and after["bytes"] <= after["max_bytes"], (before, after)
    workers = [p for p in after["processes"] if p["role"] == "worker" and p["alive"]]
    assert sorted(p["slot"] for p in workers) == [1, 2]
    assert [p["slot"] for p in after["processes"] if p["role"] == "daemon"] == [0]
    asked = {p["pid"]: p["hits"] + p["misses"] for p in before["processes"]}
    assert sum(p["hits"] + p["misses"] - asked.get(p["pid"], 0) for p in workers) == 12, (before, after)
    for p in workers:
        if p["hits"] + p["misses"]:
            assert p["hit_ratio"] == round(p["hits"] / (p["hits"] + p["misses"]), 4)
    assert site.admin.post("/api/purge", {"urls": [f"http://{site.host}/w/books-0.txt"]}).json == {"purged": 1}
    purged = site.admin.get("/api/cache").json
    assert purged["entries"] == after["entries"] - 1 and purged["last_purge"]["purged"] == 1, (after, purged)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", purged["last_purge"]["at"])
    assert site.node.client().get("/api/cache").status == 401


def test_traffic_and_metrics_sum_over_workers(site):
    site.put("w/count.txt", b"count me")
    host = site.host

    def totals():
        traffic = site.admin.get("/api/metrics?range=1h").json
        return sum(p["requests"] for p in traffic["points"]), _metric(site, host)

    requests_before, metric_before = settled(totals)
    assert all(r.status == 200 for r in parallel(73, lambda i: site.get("/w/count.txt")))
    assert wait_until(lambda: totals() == (requests_before + 73, metric_before + 73), 3), totals()
    time.sleep(0.6)  # nothing is counted twice on a later flush
    assert totals() == (requests_before + 73, metric_before + 73)


def test_killed_worker_is_restarted_and_service_continues(site):
    site.put("w/k", b"x")
    victim = live_workers(site.node)[0]
    os.kill(victim, signal.SIGKILL)
    restarted = re.compile(rf"public worker {victim} \(slot \d\) exited \(signal 9\): restarting")
    assert wait_until(lambda: restarted.search(site.node.log()), 5), site.node.log()
    assert wait_until(lambda: len(live_workers(site.node)) == 2, 5)
    assert victim not in live_workers(site.node)
    assert {r.status for r in parallel(20, lambda i: site.get("/w/k"))} == {200}


def test_sigterm_stops_daemon_and_workers(site):
    pids = live_workers(site.node)
    assert len(pids) == 2
    assert site.node.stop(timeout=15) == 0
    assert wait_until(lambda: not any(alive(pid) for pid in pids), 5)


def settled(read):
    """read() once it gives the same answer twice, 0.6 s apart (the workers send counts every 0.25 s)."""
    last = read()
    for _ in range(20):
        time.sleep(0.6)
        now = read()
        if now == last:
            return now
        last = now
    raise AssertionError(f"counts still moving: {last}")


def _cache_stats(site) -> dict:
    return site.admin.get("/api/panel").json["metrics"]["cache"]


def _metric(site, host) -> int:
    text = site.admin.get("/metrics").body.decode()
    match = re.search(rf'^contentnode_traffic_requests_total\{{port="public",domain="{re.escape(host)}"\}} (\d+)$',
                      text, re.M)
    return int(match.group(1)) if match else 0


def _entry_bytes(root) -> int:
    total = 0
    for sub in os.listdir(root):
        folder = os.path.join(root, sub)
        if len(sub) == 2 and os.path.isdir(folder):
            total += sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))
    return total


def _thread_cpus(pid: int) -> list:
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.append(sorted(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:
            pass
    return found
