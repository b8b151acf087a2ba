"""Public worker processes (issue 15 item 2): the 10 KB cache hit with 1 and 2 workers, one run.

Three placements, each run for N = 1 and N = 2 (`public_workers`), slices
interleaved as in bench_content.py:

- pinned: every node process on CPU 0, wrk on CPU 1 (sched_setaffinity on the
  daemon and its workers after start; wrk inherits this script's affinity).
  One CPU for the node whatever N is: shows what a second worker costs when
  there is no second CPU for it (the 1-CPU node).
- default: the node as it runs by itself (public_cpu_affinity auto: each
  public process keeps its threads to a CPU of its own), wrk free on both
  CPUs. On this 2-CPU machine N = 2 cannot have a CPU of its own per worker
  AND the load generator one of its own; this is the gain a 2-CPU node sees
  with its load coming from elsewhere, minus what wrk takes here. Run first,
  before the pinned placement changes the node's CPU sets.
- CPU per hit: user + system time of the daemon and every worker over the
  requests answered: the cost of a hit does not grow with N if the workers
  share nothing on the hot path; with equal CPU per hit, requests/s scale with
  the CPUs given to the workers.

Also the memory each process holds (VmRSS, and VmPSS-like private bytes from
/proc/PID/smaps_rollup) after the runs.

    python bench/bench_workers.py [--duration 10] [--rounds 5]
"""

import argparse
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import HOST, SIZE, start_node  # noqa: E402
from common import cpu_seconds, install_cleanup, load, loadavg, rss_kib, temp_dir  # noqa: E402
from tests.peers.seaweed import SeaweedS3  # noqa: E402

CONNECTIONS = 32


def node_pids(daemon) -> list[int]:
    """The daemon and its worker processes."""
    with open(f"/proc/{daemon.pid}/task/{daemon.pid}/children") as f:
        return [daemon.pid] + [int(pid) for pid in f.read().split()]


def pin(pids, cpus) -> None:
    for pid in pids:
        for task in os.listdir(f"/proc/{pid}/task"):  # threads started later inherit their creator's
            try:
                os.sched_setaffinity(int(task), cpus)
            except ProcessLookupError:
                pass  # a connection's thread that has just ended


def private_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        fields = {line.split(":")[0]: line.split()[1] for line in f if ":" in line}
    return int(fields.get("Private_Clean", 0)) + int(fields.get("Private_Dirty", 0))


def run(nodes: dict, placement: str, duration: float, rounds: int) -> dict:
    """Each node for `duration` s in interleaved slices; requests/s and CPU us per hit over all its processes."""
    all_cpus = set(range(os.cpu_count() or 1))
    acc = {n: {"requests": 0, "seconds": 0.0, "cpu_s": 0.0, "errors": 0} for n in nodes}
    for r in range(rounds):
        order = list(nodes)[r % len(nodes):] + list(nodes)[:r % len(nodes)]
        for n in order:
            daemon = nodes[n]
            pids = node_pids(daemon)
            if placement == "pinned":
                pin(pids, {0})
            os.sched_setaffinity(0, {1} if placement == "pinned" else all_cpus)
            before = sum(cpu_seconds(pid) for pid in pids)
            one = load(daemon.public_port, "/hit/obj.bin", CONNECTIONS, duration / rounds, {"Host": HOST}, tool="wrk")
            a = acc[n]
            a["cpu_s"] += sum(cpu_seconds(pid) for pid in pids) - before
            a["requests"] += one["requests"]
            a["seconds"] += one["requests"] / one["rps"] if one["rps"] else duration / rounds
            a["errors"] += one["errors"]
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    os.sched_setaffinity(0, all_cpus)
    return {n: {"rps": a["requests"] / a["seconds"] if a["seconds"] else 0.0,
                "cpu_us": a["cpu_s"] / a["requests"] * 1e6 if a["requests"] else float("nan"),
                "errors": a["errors"]} for n, a in acc.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per run (default 5)")
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        print("needs at least 2 CPUs (one for the load generator)", file=sys.stderr)
        return 2
    install_cleanup()
    body, big = os.urandom(SIZE), os.urandom(1024)
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    load_before = loadavg()
    try:
        nodes = {n: start_node(seaweed, body, big, public_workers=n, bucket=f"bench{n}") for n in (1, 2)}
        for daemon in nodes.values():
            load(daemon.public_port, "/hit/obj.bin", 8, 1.0, {"Host": HOST}, tool="wrk")  # warm-up
        figures = {placement: run(nodes, placement, args.duration, args.rounds)
                   for placement in ("default", "pinned")}
        memory = {n: [(pid, rss_kib(pid), private_kib(pid)) for pid in node_pids(d)] for n, d in nodes.items()}
    finally:
        seaweed.close()
    load_after = loadavg()
    print(f"10 KB cache hit, keep-alive, {CONNECTIONS} connections, wrk -t1; {args.duration:g} s per run in "
          f"{args.rounds} slices; {os.cpu_count()} CPUs; load average {load_before:.1f} before / "
          f"{load_after:.1f} after")
    print(f"{'placement':<10}{'workers':>8}{'req/s':>10}{'CPU us/hit':>12}{'errors':>8}")
    for placement, cells in figures.items():
        for n, cell in cells.items():
            print(f"{placement:<10}{n:>8}{cell['rps']:>10.0f}{cell['cpu_us']:>12.1f}{cell['errors']:>8}")
    for placement, cells in figures.items():
        print(f"{placement}: 2 workers / 1 worker requests/s = {cells[2]['rps'] / cells[1]['rps']:.2f}; "
              f"CPU per hit {cells[2]['cpu_us'] / cells[1]['cpu_us']:.2f} x")
    for n, rows in memory.items():
        shown = ", ".join(f"{'daemon' if i == 0 else 'worker'} {rss // 1024} MiB RSS / {private // 1024} MiB private"
                          for i, (pid, rss, private) in enumerate(rows))
        print(f"public_workers={n}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
