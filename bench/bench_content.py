"""The content path against its targets (issues 6 and 15), measured side by side in one run.

- 10 KB hit: an object served from the node's disk cache vs Debian's nginx
  (one worker) serving the same bytes from disk; keep-alive, 32 connections
  (wrk). Targets: the node >= 20 % of nginx's requests/s, and the node's CPU
  time per hit <= 1.2 x its CPU time per GET /healthz (the server's own floor,
  measured on the same daemon in the same run).
- 1 MB hit: the same with a 1 MB object (sendfile). Target: >= 90 % of nginx.
  Shown beside it, without a target: nginx with open_file_cache (descriptors
  kept open between requests, as the node keeps a large entry's file open),
  and the CPU per 1 MB answer of the node over nginx's.
- miss path: the 10 KB object from a rule with cache_ttl 0, so answers come
  from SeaweedFS on loopback (directly, not through the tests' counting front):
  with 1 connection every request is one origin GET; with 32 connections
  concurrent requests for the one key share origin GETs (single flight).

Each run's time is cut into --rounds slices interleaved with the others in a
rotating order, so a burst of other work on the machine hits them alike; CPU
per request is the server process's user+system time over the requests it
answered (/proc/PID/stat), the figure least moved by other load.

    python bench/bench_content.py [--duration 10] [--rounds 5] [--log-level info] [--json FILE] [--strict]

Everything binds 127.0.0.1; nginx runs in the foreground with a temp prefix;
every process started is ended on exit.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from common import (Daemon, _spawn, cpu_seconds, free_port, http_request, install_cleanup,  # noqa: E402
                    load, loadavg, median, temp_dir, wait_http)
from tests.peers.seaweed import SeaweedS3  # noqa: E402

TARGET_HIT = 0.20        # node / nginx requests/s, 10 KB hit
TARGET_CPU_RATIO = 1.2   # node CPU per 10 KB hit / CPU per GET /healthz
TARGET_BIG = 0.90        # node / nginx requests/s, 1 MB hit
HOST = "bench.example.test"
SIZE = 10 * 1024
BIG_SIZE = 1024 * 1024
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

_NGINX_TEMPLATE = """worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    types {{ text/html html; }}
    client_body_temp_path {prefix}/tmp; proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp; uwsgi_temp_path {prefix}/tmp; scgi_temp_path {prefix}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
    }}
    server {{
        listen 127.0.0.1:{port_ofc};
        root {prefix}/html;
        SECOND
    }}
}}
"""


def nginx_conf(second: str) -> str:
    """An nginx.conf template (prefix, port, port_ofc): one worker, two servers on one root,
    the second with the `second` directives."""
    return _NGINX_TEMPLATE.replace("SECOND", second)


NGINX_CONF = nginx_conf("open_file_cache max=64;")


def start_nginx(files: dict, conf_template: str = NGINX_CONF) -> tuple:
    """nginx in the foreground serving {name: bytes} on two free loopback ports, the second
    with open_file_cache (or what `conf_template` says); (worker pid, port, second port)."""
    if not os.access(NGINX, os.X_OK):
        raise RuntimeError("nginx is not installed (apt-get install nginx-light)")
    prefix = temp_dir("contentnode-bench-nginx-")
    os.makedirs(os.path.join(prefix, "html"))
    os.makedirs(os.path.join(prefix, "tmp"))
    for name, body in files.items():
        with open(os.path.join(prefix, "html", name), "wb") as f:
            f.write(body)
        os.chmod(os.path.join(prefix, "html", name), 0o755)
    for path in (prefix, os.path.join(prefix, "html")):
        os.chmod(path, 0o755)   # nginx's workers drop root for nobody
    port, port_ofc = free_port(), free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(conf_template.format(prefix=prefix, port=port, port_ofc=port_ofc))
    proc = _spawn([NGINX, "-p", prefix, "-c", conf, "-g", "daemon off;"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/" + next(iter(files)), time.monotonic() + 20, proc)
    with open(os.path.join(prefix, "nginx.pid")) as f:
        master = int(f.read())
    workers = [int(p) for p in open(f"/proc/{master}/task/{master}/children").read().split()]
    return workers[0] if workers else master, port, port_ofc


def api(daemon, method, path, obj=None):
    status, _, body = http_request(daemon.admin_port, method, path, obj, {"Cookie": daemon.cookie})
    if status not in (200, 201):
        raise RuntimeError(f"{method} {path} answered {status}: {body[:300]!r}")
    return json.loads(body)


def start_node(seaweed, body: bytes, big: bytes, public_workers: int = 1, bucket: str = "bench",
               daemon_factory=Daemon, log_level: str = "warning") -> Daemon:
    """A node serving /hit/obj.bin, /hit/big.bin (cached) and /miss/obj.bin (cache_ttl 0) from SeaweedFS."""
    daemon = daemon_factory(temp_dir(), env={"CONTENTNODE_PUBLIC_WORKERS": str(public_workers)},
                            log_level=log_level).start()
    daemon.setup_admin()
    seaweed.create_bucket(bucket)
    seaweed.put_object(bucket, "obj.bin", body)
    seaweed.put_object(bucket, "big.bin", big)
    record = api(daemon, "POST", "/api/buckets",
                 seaweed.bucket_definition(bucket, endpoint=seaweed.direct_endpoint))
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": record["id"]})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/miss", "bucket": record["id"],
                                       "cache_ttl": 0})
    warm = api(daemon, "POST", "/api/warm", {"urls": [f"http://{HOST}/hit/obj.bin", f"http://{HOST}/hit/big.bin"]})
    if not all(r["ok"] for r in warm["results"]):
        raise RuntimeError(f"warming the objects failed: {warm}")
    for path, want in (("/hit/obj.bin", body), ("/hit/big.bin", big), ("/miss/obj.bin", body)):
        status, headers, got = http_request(daemon.public_port, "GET", path, headers={"Host": HOST})
        if status != 200 or got != want:
            raise RuntimeError(f"{path} answered {status} ({len(got)} bytes)")
    return daemon


def _wrk(port, path, headers, conns, seconds, script=None) -> dict:
    return load(port, path, conns, seconds, headers, tool="wrk", script=script)


def run_cells(cells: dict, duration: float, rounds: int, measure=_wrk) -> dict:
    """Each cell (pid, port, path, headers, connections[, wrk script]) for `duration` s in interleaved
    slices; `measure(port, path, headers, connections, seconds[, script])` runs one slice (default: wrk)."""
    names = list(cells)
    acc = {name: {"requests": 0, "seconds": 0.0, "cpu_s": 0.0, "errors": 0, "p50": [], "p99": [], "slices": []}
           for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            pid, port, path, headers, conns, *script = cells[name]
            cpu0 = cpu_seconds(pid)
            one = measure(port, path, headers, conns, duration / rounds, *script)
            a = acc[name]
            spent = cpu_seconds(pid) - cpu0
            a["cpu_s"] += spent
            a["slices"].append(spent / one["requests"] * 1e6 if one["requests"] else float("nan"))
            a["requests"] += one["requests"]
            a["seconds"] += one["requests"] / one["rps"] if one["rps"] else duration / rounds
            a["errors"] += one["errors"]
            a["p50"].append(one["p50_ms"])
            a["p99"].append(one["p99_ms"])
        print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return {name: {"rps": a["requests"] / a["seconds"] if a["seconds"] else 0.0, "requests": a["requests"],
                   "errors": a["errors"], "cpu_us": a["cpu_s"] / a["requests"] * 1e6 if a["requests"] else float("nan"),
                   "p50_ms": sorted(a["p50"])[len(a["p50"]) // 2], "p99_ms": sorted(a["p99"])[len(a["p99"]) // 2],
                   "slice_cpu_us": a["slices"]}
            for name, a in acc.items()}


def paired_ratio(figures: dict, name: str, base: str) -> float:
    """The median over the rounds of (CPU per request of `name` / of `base`) in the same round: the
    two slices of a round run back to back, so a burst of other work skews a round's pair, not the
    figure (the totals' ratio takes every burst in whole). A round where a slice read no CPU tick
    (a slice starved by other work answers nothing) has no ratio and is left out."""
    ratios = [a / b for a, b in zip(figures[name]["slice_cpu_us"], figures[base]["slice_cpu_us"]) if a and b]
    if not ratios:
        raise SystemExit(f"no round measured both {name} and {base}: the machine is too busy")
    return median(ratios)


def print_figures(figures: dict, heading: str, load_before: float, load_after: float) -> None:
    """The heading with the machine's load, then a row per cell (with its bytes when cells have them)."""
    print(f"{heading}; {os.cpu_count()} CPUs; load average {load_before:.1f} before / {load_after:.1f} after")
    if max(load_before, load_after) > 0.5 * (os.cpu_count() or 1):
        print("WARNING: the machine is busy with other work; requests/s are skewed (CPU us/request less so)")
    sized = all("bytes" in cell for cell in figures.values())
    print(f"{'run':<18}" + (f"{'bytes':>8}" if sized else "")
          + f"{'req/s':>10}{'CPU us/req':>12}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for name, cell in figures.items():
        print(f"{name:<18}" + (f"{cell['bytes']:>8}" if sized else "")
              + f"{cell['rps']:>10.0f}{cell['cpu_us']:>12.1f}{cell['p50_ms']:>9.2f}{cell['p99_ms']:>9.2f}"
              f"{cell['errors']:>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per run (default 5)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--log-level", default="warning",
                        help="the node's log_level: info writes access lines as the default configuration "
                             "does (default warning: no access lines)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    install_cleanup()
    body, big = os.urandom(SIZE), os.urandom(BIG_SIZE)
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    load_before = loadavg()
    try:
        daemon = start_node(seaweed, body, big, log_level=args.log_level)
        nginx_pid, nginx_port, nginx_ofc_port = start_nginx({"obj.bin": body, "big.bin": big})
        host = {"Host": HOST}
        node = daemon.pid
        for port, path, headers in ((nginx_port, "/obj.bin", None), (daemon.public_port, "/hit/obj.bin", host),
                                    (daemon.admin_port, "/healthz", None)):
            load(port, path, 8, 1.0, headers, tool="wrk")            # warm-up
        figures = run_cells({
            "nginx_hit_c32": (nginx_pid, nginx_port, "/obj.bin", None, 32),
            "node_hit_c32": (node, daemon.public_port, "/hit/obj.bin", host, 32),
            "node_healthz_c32": (node, daemon.admin_port, "/healthz", None, 32),
            "nginx_1mb_c32": (nginx_pid, nginx_port, "/big.bin", None, 32),
            "nginx_ofc_1mb_c32": (nginx_pid, nginx_ofc_port, "/big.bin", None, 32),
            "node_1mb_c32": (node, daemon.public_port, "/hit/big.bin", host, 32),
        }, args.duration, args.rounds)
        figures.update(run_cells({
            "node_miss_c1": (node, daemon.public_port, "/miss/obj.bin", host, 1),
            "node_miss_c32": (node, daemon.public_port, "/miss/obj.bin", host, 32),
        }, args.duration, 1))
    finally:
        seaweed.close()
    load_after = loadavg()
    ratio = figures["node_hit_c32"]["rps"] / figures["nginx_hit_c32"]["rps"]
    cpu_ratio = figures["node_hit_c32"]["cpu_us"] / figures["node_healthz_c32"]["cpu_us"]
    big_ratio = figures["node_1mb_c32"]["rps"] / figures["nginx_1mb_c32"]["rps"]
    big_ofc_ratio = figures["node_1mb_c32"]["rps"] / figures["nginx_ofc_1mb_c32"]["rps"]
    big_cpu_ratio = figures["node_1mb_c32"]["cpu_us"] / figures["nginx_1mb_c32"]["cpu_us"]
    print_figures(figures, f"keep-alive, wrk -t1; {args.duration:g} s per run in {args.rounds} interleaved slices; "
                           f"node log_level {args.log_level}", load_before, load_after)
    checks = [("10 KB hit: node / nginx requests/s", ratio, f">= {TARGET_HIT:.0%}", ratio >= TARGET_HIT),
              ("10 KB hit CPU / GET /healthz CPU", cpu_ratio, f"<= {TARGET_CPU_RATIO:g}", cpu_ratio <= TARGET_CPU_RATIO),
              ("1 MB hit: node / nginx requests/s", big_ratio, f">= {TARGET_BIG:.0%}", big_ratio >= TARGET_BIG)]
    for label, value, target, ok in checks:
        shown = f"{value:.2f}" if "CPU" in label else f"{value:.1%}"
        print(f"{label:<40}{shown:>8}  (target {target}: {'met' if ok else 'MISSED'})")
    print(f"{'1 MB hit: node / nginx open_file_cache':<40}{big_ofc_ratio:>8.1%}  (no target)")
    print(f"{'1 MB hit CPU: node / nginx':<40}{big_cpu_ratio:>8.2f}  (no target)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "hit_ratio": ratio, "cpu_ratio": cpu_ratio, "big_ratio": big_ratio,
                       "big_ofc_ratio": big_ofc_ratio, "big_cpu_ratio": big_cpu_ratio,
                       "loadavg": [load_before, load_after]}, f, indent=2)
    return 1 if args.strict and not all(ok for *_, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
