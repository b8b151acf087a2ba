"""The CPU cost of traffic insight's counting per request (issue 34: goal <= 5 % over the same hits without it).

Two daemons serve the same 10 KB objects from their disk cache (a folder bucket, cache_ttl 3600),
both started the same way (`python -c` running the contentnode module): "counting" as shipped,
and "without", with the counting call (contentnode.public.insight.count) replaced by a no-op
before it serves, so everything else is equal. wrk (or the Python load generator) asks for --paths distinct objects in turn over
--connections keep-alive connections; the runs alternate between the two daemons in --rounds
slices (rotating order) so a burst of other work on the machine hits both alike. The figure is
each daemon's user+system CPU time (/proc/PID/stat) over the requests it answered, and the
ratio counting / without: the median of the rounds' ratios (the two slices of a round run back to
back, so a burst of other work skews one pair, not the figure), the totals' ratio beside it.

    python bench/bench_traffic.py [--duration 10] [--rounds 5] [--connections 8] [--paths 100] [--json FILE]

Both daemons run with one public process (the default public_workers = 1), so the counting and
its summaries run in the measured process. Everything binds 127.0.0.1; both are stopped on exit.
"""

import argparse
import json
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from common import Daemon, cpu_seconds, http_request, install_cleanup, load, loadavg, median, temp_dir  # noqa: E402

GOAL = 1.05
HOST = "bench.example.test"
SIZE = 10 * 1024
RUN = "import runpy; runpy.run_module('contentnode', run_name='__main__')"
NO_COUNTING = "import contentnode.public.insight as insight; insight.count = lambda *args: None; "


class LaunchedDaemon(Daemon):
    """The daemon started through `python -c` (both sides alike: only the counting differs)."""

    def __init__(self, workdir: str, counting: bool):
        super().__init__(workdir)
        self.prelude = "" if counting else NO_COUNTING

    def _cmd(self, admin_port: int, public_port: int) -> list:
        return [sys.executable, "-c", self.prelude + RUN, *super()._cmd(admin_port, public_port)[3:]]


def api(daemon, method, path, obj=None):
    status, _, body = http_request(daemon.admin_port, method, path, obj, headers={"Cookie": daemon.cookie})
    if status >= 300:
        raise RuntimeError(f"{method} {path} answered {status}: {body[:300]!r}")
    return json.loads(body) if body else None


def prepare(daemon, paths: int) -> None:
    """A folder bucket of `paths` 10 KB objects under HOST, each fetched once (in the cache)."""
    daemon.setup_admin()
    folder = os.path.join(daemon.data_dir, "sites", "bench")
    os.makedirs(os.path.join(folder, "o"))
    for i in range(paths):
        with open(os.path.join(folder, "o", f"{i}.bin"), "wb") as f:
            f.write(os.urandom(SIZE))
    bucket = api(daemon, "POST", "/api/buckets", {"name": "bench", "type": "folder", "path": folder})
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/", "bucket": bucket["id"], "cache_ttl": 3600})
    for i in range(paths):
        status, _, _ = http_request(daemon.public_port, "GET", f"/o/{i}.bin", headers={"Host": HOST})
        if status != 200:
            raise RuntimeError(f"/o/{i}.bin answered {status}")


def wrk_script(workdir: str, paths: int) -> str:
    path = os.path.join(workdir, "paths.lua")
    with open(path, "w") as f:
        f.write(f"counter = 0\nrequest = function()\n  counter = counter + 1\n"
                f"  return wrk.format(nil, \"/o/\" .. (counter % {paths}) .. \".bin?v=\" .. counter)\nend\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load per daemon in all")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--paths", type=int, default=100, help="distinct objects asked for in turn")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args()
    install_cleanup()
    load_before = loadavg()
    work = temp_dir()
    daemons = {name: LaunchedDaemon(os.path.join(work, name), name == "counting") for name in ("counting", "without")}
    for daemon in daemons.values():
        os.makedirs(daemon.workdir)
        daemon.start()
        prepare(daemon, args.paths)
    script = wrk_script(work, args.paths)
    totals = {name: {"cpu": 0.0, "requests": 0, "errors": 0, "slices": []} for name in daemons}
    names = list(daemons)
    for round_number in range(args.rounds):
        for name in names[round_number % 2:] + names[:round_number % 2]:
            daemon = daemons[name]
            cpu = cpu_seconds(daemon.pid)
            result = load(daemon.public_port, "/o/0.bin", args.connections, args.duration / args.rounds,
                          headers={"Host": HOST}, script=script)
            spent = cpu_seconds(daemon.pid) - cpu
            totals[name]["cpu"] += spent
            totals[name]["slices"].append(spent / max(1, result["requests"]))
            totals[name]["requests"] += result["requests"]
            totals[name]["errors"] += result["errors"]
    per_request = {name: 1e6 * t["cpu"] / max(1, t["requests"]) for name, t in totals.items()}
    totals_ratio = per_request["counting"] / per_request["without"]
    ratio = median([a / b for a, b in zip(totals["counting"]["slices"], totals["without"]["slices"])])   # rounds' pairs
    load_after = loadavg()
    print(f"10 KB hits over {args.paths} paths, {args.connections} connections, {args.rounds} x "
          f"{args.duration / args.rounds:.1f} s per daemon")
    for name, t in totals.items():
        print(f"  {name:9s} {t['requests']:8d} requests ({t['errors']} errors)  CPU {per_request[name]:7.1f} us/request")
    print(f"  counting / without, median of the {args.rounds} rounds' pairs: {ratio:.3f} "
          f"(goal <= {GOAL:.2f}: {'met' if ratio <= GOAL else 'NOT met'}); of the totals: {totals_ratio:.3f}")
    print(f"  load average: {load_before:.2f} before, {load_after:.2f} after")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"totals": totals, "cpu_us_per_request": per_request, "ratio": ratio, "totals_ratio": totals_ratio,
                       "load_before": load_before, "load_after": load_after}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
