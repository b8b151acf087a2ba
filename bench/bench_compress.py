"""Compressed hits beside nginx with `gzip on` at the same level, measured in one run.

The node compresses an object once per coding and keeps the result in its
cache, so a compressed hit should cost it about what an uncompressed one
does; nginx's gzip module compresses every answer again. Cells (keep-alive,
wrk, --connections connections, one worker/process each, the same text page
of --kib KiB):

- nginx_plain / node_plain: no Accept-Encoding, the page as it is;
- nginx_gzip / node_gzip: `Accept-Encoding: gzip`; nginx with `gzip on;
  gzip_comp_level 6` (the node's level), the node from its cached gzip variant.

Printed: bytes per answer, requests/s, CPU us per answer (the server
process's user+system time over the answers it sent), and the goal of issue
26: node/nginx CPU per compressed hit within the ratio of node/nginx CPU per
uncompressed hit.

    python bench/bench_compress.py [--duration 10] [--rounds 5] [--connections 32] [--kib 24]
                                   [--json FILE] [--strict]

Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import gzip
import json
import os
import random
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import api, nginx_conf, print_figures, run_cells, start_nginx  # noqa: E402
from common import Daemon, http_request, install_cleanup, load, loadavg, temp_dir  # noqa: E402

from contentnode.core import encodings  # noqa: E402
from tests.peers.seaweed import SeaweedS3  # noqa: E402

HOST = "bench.example.test"

NGINX_GZIP_CONF = nginx_conf(f"gzip on; gzip_comp_level {encodings.GZIP_LEVEL}; "
                             f"gzip_min_length {encodings.MIN_BYTES}; gzip_vary on;")


def page(kib: int) -> bytes:
    """An HTML page of about `kib` KiB with the repetition of real markup (it gzips ~5x)."""
    rng = random.Random(26)
    words = ["content", "node", "cache", "object", "bucket", "rule", "domain", "purge", "signed", "image"]
    rows = []
    while sum(map(len, rows)) < kib * 1024:
        text = " ".join(rng.choice(words) for _ in range(12))
        rows.append(f'<li class="item-{rng.randrange(100)}"><a href="/p/{rng.randrange(10**6)}">{text}</a></li>\n')
    return ("<!doctype html><html><head><title>bench</title></head><body><ul>\n" + "".join(rows)
            + "</ul></body></html>\n").encode()


def start_node(seaweed, body: bytes) -> Daemon:
    daemon = Daemon(temp_dir(), env={"CONTENTNODE_PUBLIC_WORKERS": "1"}).start()
    daemon.setup_admin()
    seaweed.create_bucket("bench")
    seaweed.put_object("bench", "page.html", body, "text/html")
    record = api(daemon, "POST", "/api/buckets", seaweed.bucket_definition("bench", endpoint=seaweed.direct_endpoint))
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": record["id"]})
    return daemon


def answer_bytes(port: int, path: str, headers: dict, body: bytes) -> int:
    """The body length of one answer, checked: the page itself, or gzip of it."""
    status, got_headers, got = http_request(port, "GET", path, headers=headers)
    coded = {k.lower(): v for k, v in got_headers.items()}.get("content-encoding")
    if status != 200 or (gzip.decompress(got) if coded == "gzip" else got) != body:
        raise RuntimeError(f"{port}{path} answered {status} ({len(got)} bytes, coding {coded})")
    if ("accept-encoding" in {k.lower() for k in headers}) != (coded == "gzip"):
        raise RuntimeError(f"{port}{path}: coding {coded} for {headers}")
    return len(got)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per cell (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per cell (default 5)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--kib", type=int, default=24, help="size of the page in KiB (default 24)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the goal is missed")
    args = parser.parse_args()
    install_cleanup()
    body = page(args.kib)
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    load_before = loadavg()
    try:
        daemon = start_node(seaweed, body)
        nginx_pid, nginx_port, nginx_gzip_port = start_nginx({"page.html": body}, NGINX_GZIP_CONF)
        plain, coded = {"Host": HOST}, {"Host": HOST, "Accept-Encoding": "gzip"}
        cells = {"nginx_plain": (nginx_pid, nginx_port, "/page.html", {}, args.connections),
                 "node_plain": (daemon.pid, daemon.public_port, "/hit/page.html", plain, args.connections),
                 "nginx_gzip": (nginx_pid, nginx_gzip_port, "/page.html", {"Accept-Encoding": "gzip"},
                                args.connections),
                 "node_gzip": (daemon.pid, daemon.public_port, "/hit/page.html", coded, args.connections)}
        sizes = {}
        for name, (_, port, path, headers, _) in cells.items():
            sizes[name] = answer_bytes(port, path, headers, body)   # also makes the node's gzip variant
            load(port, path, 8, 1.0, headers, tool="wrk")             # warm-up
        figures = run_cells(cells, args.duration, args.rounds)
    finally:
        seaweed.close()
    load_after = loadavg()
    for name, cell in figures.items():
        cell["bytes"] = sizes[name]
    plain_ratio = figures["node_plain"]["cpu_us"] / figures["nginx_plain"]["cpu_us"]
    gzip_ratio = figures["node_gzip"]["cpu_us"] / figures["nginx_gzip"]["cpu_us"]
    met = gzip_ratio <= plain_ratio
    print_figures(figures, f"a {len(body)}-byte HTML page; keep-alive, wrk -t1, {args.connections} connections; "
                  f"{args.duration:g} s per cell in {args.rounds} interleaved slices", load_before, load_after)
    print(f"CPU per uncompressed hit, node / nginx: {plain_ratio:.2f}")
    print(f"CPU per gzip hit, node / nginx:         {gzip_ratio:.2f}  "
          f"(goal: <= the uncompressed ratio: {'met' if met else 'MISSED'})")
    print(f"node CPU per gzip hit / per uncompressed hit: "
          f"{figures['node_gzip']['cpu_us'] / figures['node_plain']['cpu_us']:.2f}; "
          f"nginx: {figures['nginx_gzip']['cpu_us'] / figures['nginx_plain']['cpu_us']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "plain_ratio": plain_ratio, "gzip_ratio": gzip_ratio,
                       "loadavg": [load_before, load_after]}, f, indent=2)
    return 1 if args.strict and not met else 0


if __name__ == "__main__":
    sys.exit(main())
