"""The fleet against the issue 21 goals, one run: a primary and two replicas (real daemons)
with SeaweedFS as the bucket, behind the tests' counting front, which sees every request.

- propagation: a rule added on the primary, timed until the first replica serves it
  through its public port (polled every 20 ms; each write after a random part of a
  poll, so writes are not in step with the replicas' polls), p50 and p99 over --writes writes at
  fleet_poll_seconds 1, and over --writes-slow writes at 10 (goal: p99 <= poll + 1 s);
- idle cost: every bucket request of an idle fleet for --idle seconds at poll 1 s, per
  node and kind, scaled to one hour (goal per replica: one conditional GET and one
  status PUT per poll, nothing else);
- apply: a bundle of 10,000 rules (signed with the primary's keys) applied by a replica,
  the time the replica logs for the apply, and the public port answering a cached
  object every 10 ms throughout (goal <= 1 s, no failed answer);
- 100 pollers: --pollers lightweight threads each sending the replica's conditional GET
  of bundle.json every second for --poll-duration s: the request rate the bucket sees
  and the answer times.

    python bench/bench_fleet.py [--writes 50] [--writes-slow 10] [--idle 30] [--pollers 100]
                                [--poll-duration 20] [--json FILE]

Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import json
import os
import random
import re
import sys
import threading
import time
from collections import Counter

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from common import install_cleanup, loadavg, percentile, temp_dir  # noqa: E402
from contentnode.core.s3_errors import S3Error  # noqa: E402
from tests.fleet_setup import Fleet, FleetNode, serving_fleet, wait_for  # noqa: E402
from tests.peers.seaweed import SeaweedS3  # noqa: E402


class _Dirs:
    """What tests/fleet_setup.Fleet asks of pytest's tmp_path_factory: mktemp(name)."""

    def mktemp(self, name: str) -> str:
        return temp_dir(f"contentnode-bench-fleet-{name}-")


def propagation(fleet: Fleet, writes: int, tag: str, poll: int) -> list:
    """Seconds from a rule's creation on the primary to the first replica serving it. Each write
    waits a random part of a poll first, so writes do not fall just after a replica's poll."""
    times = []
    for i in range(writes):
        time.sleep(random.uniform(0, poll))
        path = f"/{tag}{i}"
        fleet.site.add_rule(path, prefix="site/")
        started = time.monotonic()
        wait_for(lambda p=path: any(fleet.served(n, f"{p}/hello.txt").status == 200 for n in fleet.replicas),
                 120, every=0.02, what=f"{path} served by a replica")
        times.append(time.monotonic() - started)
    return times


def _kind(method: str, path: str, node_ids: dict) -> tuple:
    node = next((name for node_id, name in node_ids.items() if f"/nodes/{node_id}" in path), None)
    if "bundle.json" in path:
        return method + " bundle.json", None
    if node:
        return method + " status", node
    return method + " " + ("list" if "list-type" in path else "other"), None


def idle_requests(fleet: Fleet, seconds: float) -> dict:
    node_ids = {c.get("/api/fleet").json["node_id"]: f"replica{i}" for i, c in enumerate(fleet.replica_admins)}
    node_ids[fleet.admin.get("/api/fleet").json["node_id"]] = "primary"
    fleet.seaweed.reset_counts()
    time.sleep(seconds)
    counts = Counter()
    for method, path, status in fleet.seaweed.requests():
        if f"/{fleet.fleet_bucket}" not in path:
            continue
        kind, node = _kind(method, path, node_ids)
        counts[(kind, status, node)] += 1
    return {f"{kind} {status}" + (f" ({node})" if node else ""): round(n * 3600 / seconds)
            for (kind, status, node), n in sorted(counts.items(), key=str)}


def apply_big(fleet: Fleet) -> dict:
    replica = fleet.replicas[0]
    assert fleet.served(replica, "/hello.txt").status == 200  # cached now
    answers, failures, stop = [], [], threading.Event()

    def probe():
        while not stop.is_set():
            started = time.monotonic()
            response = fleet.served(replica, "/hello.txt")
            answers.append(time.monotonic() - started)
            if response.status != 200:
                failures.append(response.status)
            time.sleep(0.01)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    raw = fleet.forge(seq_delta=100, parts=fleet.big_parts("big"))
    logged = len(replica.log())
    fleet.put_bundle(raw)
    applied = re.compile(r"applied bundle seq \d+ from \w+ in ([\d.]+) s")
    seconds = wait_for(lambda: applied.findall(replica.log()[logged:]), 60, what="the 10,000-rule bundle applied")
    assert sum(r["prefix"] == "big/" for r in fleet.state(replica)["rules"].values()) == 10000
    time.sleep(0.5)
    stop.set()
    thread.join(5)
    return {"bundle_bytes": len(raw), "apply_seconds": float(seconds[-1]), "public_answers": len(answers),
            "public_failures": len(failures), "public_p99_ms": round(percentile(answers, 99) * 1000, 1),
            "public_max_ms": round(max(answers) * 1000, 1)}


def pollers(fleet: Fleet, count: int, duration: float) -> dict:
    client = fleet.bucket_client()
    first = client.get_bytes("contentnode/bundle.json")
    times, errors, stop = [], [], threading.Event()
    lock = threading.Lock()

    def poller(offset: float):
        time.sleep(offset)
        while not stop.is_set():
            started = time.monotonic()
            try:
                client.get_bytes("contentnode/bundle.json", if_none_match=first.etag)
            except S3Error as exc:
                errors.append(exc.code)
            with lock:
                times.append(time.monotonic() - started)
            stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    fleet.seaweed.reset_counts()
    threads = [threading.Thread(target=poller, args=(i / count,), daemon=True) for i in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(duration)
    stop.set()
    for thread in threads:
        thread.join(15)
    elapsed = time.monotonic() - started
    seen = sum(1 for m, p, s in fleet.seaweed.requests() if "bundle.json" in p)
    return {"pollers": count, "seconds": round(elapsed, 1), "bucket_requests_per_s": round(seen / elapsed, 1),
            "answer_p50_ms": round(percentile(times, 50) * 1000, 1),
            "answer_p99_ms": round(percentile(times, 99) * 1000, 1), "errors": len(errors)}


def summary(times: list) -> dict:
    return {"writes": len(times), "p50_s": round(percentile(times, 50), 2), "p99_s": round(percentile(times, 99), 2),
            "max_s": round(max(times), 2)}


def run_fleet(seaweed, poll: int, writes: int):
    FleetNode.poll_env = {"CONTENTNODE_FLEET_POLL_SECONDS": str(poll)}
    fleet = serving_fleet(_Dirs(), seaweed, timeout=4 * poll + 10)
    return fleet, summary(propagation(fleet, writes, f"p{poll}x", poll))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=50, help="writes timed at poll 1 s (default 50)")
    parser.add_argument("--writes-slow", type=int, default=10, help="writes timed at poll 10 s (default 10)")
    parser.add_argument("--idle", type=float, default=30, help="seconds of idle fleet counted (default 30)")
    parser.add_argument("--pollers", type=int, default=100, help="simulated replicas (default 100)")
    parser.add_argument("--poll-duration", type=float, default=20, help="seconds the pollers run (default 20)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    install_cleanup()
    load_before = loadavg()
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    figures = {}
    try:
        fleet, figures["propagation_poll_1s"] = run_fleet(seaweed, 1, args.writes)
        figures["idle_requests_per_hour_poll_1s"] = idle_requests(fleet, args.idle)
        figures["apply_10000_rules"] = apply_big(fleet)
        figures["simulated_pollers"] = pollers(fleet, args.pollers, args.poll_duration)
        fleet.close()
        if args.writes_slow:
            fleet, figures["propagation_poll_10s"] = run_fleet(seaweed, 10, args.writes_slow)
            fleet.close()
    finally:
        seaweed.close()
    figures["load_average"] = {"before": round(load_before, 2), "after": round(loadavg(), 2),
                               "cpus": os.cpu_count()}
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
