"""The content path against its target (issue 6), measured side by side in one run.

- hit path: a 10 KB object served from the node's disk cache (sendfile) vs
  Debian's nginx serving the same bytes from disk; keep-alive, 32 connections
  (wrk). Target: the node >= 30 % of nginx's requests/s.
- miss path: the same size from a rule with cache_ttl 0, so answers come from
  SeaweedFS on loopback (directly, not through the tests' counting front):
  with 1 connection every request is one origin GET; with 32 connections
  concurrent requests for the one key share origin GETs (single flight).

    python bench/bench_content.py [--duration 10] [--json FILE] [--strict]

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

from common import (Daemon, _spawn, free_port, http_request, install_cleanup, load,  # noqa: E402
                    temp_dir, wait_http)
from tests.peers.seaweed import SeaweedS3  # noqa: E402

TARGET_HIT = 0.30
HOST = "bench.example.test"
SIZE = 10 * 1024
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

NGINX_CONF = """worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {prefix}/tmp; proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp; uwsgi_temp_path {prefix}/tmp; scgi_temp_path {prefix}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
    }}
}}
"""


def start_nginx(body: bytes) -> int:
    """nginx in the foreground on a free loopback port serving /obj.bin; its port."""
    if not os.access(NGINX, os.X_OK):
        raise RuntimeError("nginx is not installed (apt-get install nginx-light)")
    prefix = temp_dir("contentnode-bench-nginx-")
    os.makedirs(os.path.join(prefix, "html"))
    os.makedirs(os.path.join(prefix, "tmp"))
    with open(os.path.join(prefix, "html", "obj.bin"), "wb") as f:
        f.write(body)
    for path in (prefix, os.path.join(prefix, "html"), os.path.join(prefix, "html", "obj.bin")):
        os.chmod(path, 0o755)   # nginx's workers drop root for nobody
    port = free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(prefix=prefix, port=port))
    proc = _spawn([NGINX, "-p", prefix, "-c", conf, "-g", "daemon off;"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/obj.bin", time.monotonic() + 20, proc)
    return port


def api(daemon, method, path, obj=None):
    status, _, body = http_request(daemon.admin_port, method, path, obj, {"Cookie": daemon.cookie})
    if status not in (200, 201):
        raise RuntimeError(f"{method} {path} answered {status}: {body[:300]!r}")
    return json.loads(body)


def start_node(seaweed, body: bytes) -> Daemon:
    """A node serving /hit/obj.bin (cached) and /miss/obj.bin (cache_ttl 0) from SeaweedFS."""
    daemon = Daemon(temp_dir()).start()
    daemon.setup_admin()
    seaweed.create_bucket("bench")
    seaweed.put_object("bench", "obj.bin", body)
    bucket = api(daemon, "POST", "/api/buckets",
                 seaweed.bucket_definition("bench", endpoint=seaweed.direct_endpoint))
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": bucket["id"]})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/miss", "bucket": bucket["id"],
                                       "cache_ttl": 0})
    warm = api(daemon, "POST", "/api/warm", {"urls": [f"http://{HOST}/hit/obj.bin"]})
    if not warm["results"][0]["ok"]:
        raise RuntimeError(f"warming the object failed: {warm}")
    for path in ("/hit/obj.bin", "/miss/obj.bin"):
        status, headers, got = http_request(daemon.public_port, "GET", path, headers={"Host": HOST})
        if status != 200 or got != body:
            raise RuntimeError(f"{path} answered {status} ({len(got)} bytes)")
    return daemon


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per load run (default 10)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the hit target is missed")
    args = parser.parse_args()
    install_cleanup()
    body = os.urandom(SIZE)
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    try:
        daemon = start_node(seaweed, body)
        nginx_port = start_nginx(body)
        host = {"Host": HOST}
        for port, path, headers in ((nginx_port, "/obj.bin", None), (daemon.public_port, "/hit/obj.bin", host)):
            load(port, path, 8, 1.0, headers, tool="wrk")            # warm-up
        figures = {
            "nginx_hit_c32": load(nginx_port, "/obj.bin", 32, args.duration, tool="wrk"),
            "node_hit_c32": load(daemon.public_port, "/hit/obj.bin", 32, args.duration, host, tool="wrk"),
            "node_miss_c1": load(daemon.public_port, "/miss/obj.bin", 1, args.duration, host, tool="wrk"),
            "node_miss_c32": load(daemon.public_port, "/miss/obj.bin", 32, args.duration, host, tool="wrk"),
        }
    finally:
        seaweed.close()
    ratio = figures["node_hit_c32"]["rps"] / figures["nginx_hit_c32"]["rps"]
    print(f"10 KB object, keep-alive, wrk; {args.duration:g} s per run")
    print(f"{'run':<16}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for name, cell in figures.items():
        print(f"{name:<16}{cell['rps']:>10.0f}{cell['p50_ms']:>9.2f}{cell['p99_ms']:>9.2f}{cell['errors']:>8}")
    verdict = "met" if ratio >= TARGET_HIT else "MISSED"
    print(f"hit path: node / nginx = {ratio:.1%} (target >= {TARGET_HIT:.0%}: {verdict})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "hit_ratio": ratio, "target": TARGET_HIT}, f, indent=2)
    return 1 if args.strict and ratio < TARGET_HIT else 0


if __name__ == "__main__":
    sys.exit(main())
