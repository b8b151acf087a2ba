"""The CPU cost of a rule's edge controls on a 10 KB cache hit, measured in one run (issue 34).

One daemon (one public process, log level warning: no access lines) serves the same cached
10 KB object from SeaweedFS through three rules on one bucket:

- plain: no edge members;
- edge: `access` (an allow list of 4 networks holding the client and a deny list of 4 that
  do not), `rate_limit` (100,000 a second, burst 1,000,000: every request takes a token from
  the shared table, none is refused) and `headers` (two added);
- edge_countries: the same with `access.countries` {"deny": ["FR"]} through a country MMDB
  file written for the run (tests/geo_db.py; the client, 127.0.0.1, is placed nowhere).

wrk drives each at --connections keep-alive connections in --rounds interleaved slices; the
figure is the public process's user+system CPU (/proc/PID/stat) per answer, compared round by
round (the median of the rounds' edge/plain ratios; the totals' ratio is printed beside it). The
goal: the edge rule costs at most 10 % more CPU per hit than the plain one.

    python bench/bench_edge.py [--duration 10] [--rounds 5] [--connections 32] [--json FILE] [--strict]

Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import json
import os
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import HOST, api, paired_ratio, print_figures, run_cells  # noqa: E402
from common import Daemon, http_request, install_cleanup, load, loadavg, temp_dir  # noqa: E402

from tests.geo_db import write_country_db  # noqa: E402
from tests.peers.seaweed import SeaweedS3  # noqa: E402

SIZE = 10 * 1024
GOAL = 1.10
ACCESS = {"allow": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8"],
          "deny": ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "127.9.0.0/16"]}
EDGE = {"access": ACCESS, "rate_limit": {"rate": 100_000, "burst": 1_000_000},
        "headers": {"X-Frame-Options": "DENY", "Strict-Transport-Security": "max-age=63072000"}}
RULES = {"plain": {}, "edge": EDGE,
         "edge_countries": dict(EDGE, access=dict(ACCESS, countries={"deny": ["FR"]}))}


def start_node(seaweed, body: bytes, rules: dict = RULES, daemon_class=Daemon, **start) -> Daemon:
    """A node with `rules` (name -> edge members) under /name, each path's object cached and checked."""
    workdir = temp_dir()
    database = write_country_db(os.path.join(workdir, "countries.mmdb"))
    daemon = daemon_class(workdir, env={"CONTENTNODE_PUBLIC_WORKERS": "1", "CONTENTNODE_GEOIP_DB": database}).start(**start)
    daemon.setup_admin()
    seaweed.create_bucket("bench")
    seaweed.put_object("bench", "obj.bin", body)
    record = api(daemon, "POST", "/api/buckets", seaweed.bucket_definition("bench", endpoint=seaweed.direct_endpoint))
    api(daemon, "POST", "/api/domains", {"host": HOST})
    for name, members in rules.items():
        api(daemon, "POST", "/api/rules", {"domain": HOST, "path": f"/{name}", "bucket": record["id"], **members})
    warm = api(daemon, "POST", "/api/warm", {"urls": [f"http://{HOST}/{name}/obj.bin" for name in rules]})
    if not all(r["ok"] for r in warm["results"]):
        raise RuntimeError(f"warming the object failed: {warm}")
    for name, members in rules.items():
        status, headers, got = http_request(daemon.public_port, "GET", f"/{name}/obj.bin", headers={"Host": HOST})
        added = {k.lower() for k in members.get("headers", {})}
        if status != 200 or got != body or not added <= {k.lower() for k in headers}:
            raise RuntimeError(f"/{name}/obj.bin answered {status} ({len(got)} bytes, headers {sorted(headers)})")
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per rule (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per rule (default 5)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the goal is missed")
    args = parser.parse_args()
    install_cleanup()
    body = os.urandom(SIZE)
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    load_before = loadavg()
    try:
        daemon = start_node(seaweed, body)
        cells = {name: (daemon.pid, daemon.public_port, f"/{name}/obj.bin", {"Host": HOST}, args.connections)
                 for name in RULES}
        for _, port, path, headers, _ in cells.values():
            load(port, path, 8, 1.0, headers, tool="wrk")   # warm-up
        figures = run_cells(cells, args.duration, args.rounds)
    finally:
        seaweed.close()
    load_after = loadavg()
    print_figures(figures, f"a {SIZE}-byte cached object; keep-alive, wrk -t1, {args.connections} connections; "
                  f"{args.duration:g} s per rule in {args.rounds} interleaved slices", load_before, load_after)
    totals = figures["edge"]["cpu_us"] / figures["plain"]["cpu_us"]
    ratio = paired_ratio(figures, "edge", "plain")
    countries = paired_ratio(figures, "edge_countries", "plain")
    met = ratio <= GOAL and not any(cell["errors"] for cell in figures.values())
    print(f"CPU per hit, edge / plain, median of the {args.rounds} rounds' pairs: {ratio:.3f} "
          f"(+{(ratio - 1) * 100:.1f} %; goal <= +{(GOAL - 1) * 100:.0f} %: {'met' if met else 'MISSED'}); "
          f"of the totals: {totals:.3f}")
    print(f"CPU per hit, edge with countries / plain, median of pairs: {countries:.3f} (+{(countries - 1) * 100:.1f} %)")
    raw = {"figures": figures, "edge_ratio": ratio, "edge_ratio_totals": totals, "countries_ratio": countries,
           "goal_met": met,
           "loadavg": [load_before, load_after], "connections": args.connections}
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(raw, indent=2))
    return int(args.strict and not met)


if __name__ == "__main__":
    sys.exit(main())
