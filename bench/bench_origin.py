"""The node in front of an HTTP origin beside Debian's nginx as a proxy_cache in front of the same origin.

- origin: a second nginx serving a 10 KB file (with ETag and Last-Modified,
  so it answers 304 to a conditional request). A static nginx, not the
  tests' Python origin, so that the origin is never what limits either proxy.
- hit: the object stored by the proxy (the node: a rule with a long
  cache_ttl; nginx: proxy_cache_valid 200 1h).
- miss: every request goes to the origin over kept-alive connections: the
  origin answers /nostore/ with `Cache-Control: no-store` (the node: a rule
  in cache_mode origin, whose every request then asks the origin on its own;
  nginx: proxy_cache_bypass and proxy_no_cache, upstream keepalive 32). Until
  this branch the node's /miss rule was `cache_ttl 0` over the origin's
  answer with validators, which the shared cache stores for revalidation: its
  "misses" were 304 revalidations, shared by the concurrent requests.
- revalidation: every request finds its stored entry stale and revalidates it
  (304 from the origin, no body moved): wrk walks KEYS distinct URLs (the
  origin answers each with the same file and `Cache-Control: max-age=1`), so
  each one is older than a second when it is asked again. The node does this
  only in `cache_mode: "origin"` (the shared cache): without it the row says
  so and is skipped.

Both proxies serve from one process (the node's daemon; nginx with one
worker); CPU per request is that process's user+system time over the
requests it answered, the figure least moved by other load on the machine.

    python bench/bench_origin.py [--duration 10] [--rounds 5] [--json FILE]

Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import json
import os
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import api, print_figures, run_cells, start_nginx  # noqa: E402
from common import Daemon, http_request, install_cleanup, load, loadavg, temp_dir  # noqa: E402

HOST = "bench.example.test"
SIZE = 10 * 1024
KEYS = 20_000    # distinct revalidation URLs: more than either proxy answers in a second

_HEAD = """worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    keepalive_requests 1000000;
    types {{ application/octet-stream bin; }}
"""

_ORIGIN_CONF = _HEAD + """    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
        location /reval/ {{ add_header Cache-Control "max-age=1"; try_files /obj.bin =404; }}
        location /nostore/ {{ add_header Cache-Control "no-store"; try_files /obj.bin =404; }}
    }}
    server {{ listen 127.0.0.1:{port_ofc}; root {prefix}/html; }}
}}
"""

# ORIGIN is filled in before nginx's own {prefix}/{port} placeholders are.
_PROXY_CONF = _HEAD + """    client_body_temp_path {prefix}/tmp; proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp; uwsgi_temp_path {prefix}/tmp; scgi_temp_path {prefix}/tmp;
    proxy_cache_path {prefix}/cache levels=1:2 keys_zone=c:64m max_size=4g inactive=1h use_temp_path=off;
    upstream origin {{ server 127.0.0.1:ORIGIN; keepalive 32; }}
    server {{
        listen 127.0.0.1:{port};
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_cache c;
        add_header X-Cache-Status $upstream_cache_status;
        location /hit/ {{ proxy_cache_valid 200 1h; proxy_pass http://origin/; }}
        location /miss/ {{ proxy_cache_bypass 1; proxy_no_cache 1; proxy_pass http://origin/nostore/; }}
        location /reval/ {{ proxy_cache_revalidate on; proxy_pass http://origin/reval/; }}
        location = /obj.bin {{ root {prefix}/html; }}   # what start_nginx waits for
    }}
    server {{ listen 127.0.0.1:{port_ofc}; root {prefix}/html; }}
}}
"""

_WALK = """counter = START
request = function()
  counter = counter + 1
  return wrk.format(nil, "/reval/o" .. (counter % KEYS) .. ".bin")
end
"""


def walk_script(start: int = 0) -> str:
    """A wrk script asking /reval/o<N>.bin for N = start + 1, start + 2, ... (modulo KEYS)."""
    path = os.path.join(temp_dir("contentnode-bench-wrk-"), "walk.lua")
    with open(path, "w") as f:
        f.write(_WALK.replace("KEYS", str(KEYS)).replace("START", str(start)))
    return path


def start_node(origin_port: int) -> tuple:
    """A node with /hit (cached 1 h), /miss (the origin's no-store answers, in cache_mode origin)
    and /reval in cache_mode origin; (daemon, whether /reval exists)."""
    daemon = Daemon(temp_dir(), log_level="warning").start()
    daemon.setup_admin()
    root = api(daemon, "POST", "/api/buckets", {"name": "origin", "type": "http",
                                                "url": f"http://127.0.0.1:{origin_port}"})
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": root["id"], "cache_ttl": 3600})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/miss", "bucket": root["id"], "cache_ttl": 0,
                                       "cache_mode": "origin", "prefix": "nostore/"})
    status, _, _ = http_request(daemon.admin_port, "POST", "/api/rules",
                                {"domain": HOST, "path": "/reval", "bucket": root["id"], "cache_mode": "origin",
                                 "prefix": "reval/"}, {"Cookie": daemon.cookie})
    return daemon, status == 201


def start_proxies(body: bytes) -> tuple:
    """The static nginx origin serving `body`, nginx's proxy_cache in front of it and the node on it:
    (origin_port, nginx_pid, nginx_port, daemon, whether the node has /reval)."""
    _, origin_port, _ = start_nginx({"obj.bin": body}, _ORIGIN_CONF)
    nginx_pid, nginx_port, _ = start_nginx({"obj.bin": body}, _PROXY_CONF.replace("ORIGIN", str(origin_port)))
    daemon, node_reval = start_node(origin_port)
    return origin_port, nginx_pid, nginx_port, daemon, node_reval


def check_answers(port: int, paths, headers, body: bytes, cache_header: str) -> None:
    """Each path answers the body; `cache_header` (nginx's X-Cache-Status, the node's X-Cache) shown."""
    for path in paths:
        status, answer, got = http_request(port, "GET", path, headers=headers)
        if status != 200 or got != body:
            raise RuntimeError(f"{path} on port {port} answered {status} ({len(got)} bytes)")
        print(f"{port} {path}: {cache_header} {answer.get(cache_header.lower())}", file=sys.stderr)


def fill(port: int, headers, seconds: float) -> None:
    """Ask every revalidation URL once, so that the measured requests revalidate instead of filling
    (in 5 s runs, until KEYS were asked or `seconds` passed)."""
    asked, ends = 0, time.monotonic() + seconds
    while asked < KEYS and time.monotonic() < ends:
        asked += load(port, "/", 16, 5, headers, tool="wrk", script=walk_script(asked))["requests"]
    if asked < KEYS:
        print(f"WARNING: the fill asked {asked} of {KEYS} URLs: some revalidation requests are misses",
              file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved slices per run (default 5)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    install_cleanup()
    body = os.urandom(SIZE)
    load_before = loadavg()
    _, nginx_pid, nginx_port, daemon, node_reval = start_proxies(body)
    host = {"Host": HOST}
    check_answers(nginx_port, ("/hit/obj.bin", "/miss/obj.bin", "/reval/o1.bin"), None, body, "X-Cache-Status")
    check_answers(daemon.public_port, ("/hit/obj.bin", "/miss/obj.bin"), host, body, "X-Cache")
    walk = walk_script()
    fill(nginx_port, None, 120)
    time.sleep(1.5)   # every filled entry is now stale
    check_answers(nginx_port, ("/hit/obj.bin", "/miss/obj.bin", "/reval/o1.bin"), None, body, "X-Cache-Status")
    if node_reval:
        check_answers(daemon.public_port, ("/reval/o1.bin",), host, body, "Cache-Status")
        fill(daemon.public_port, host, 120)
    for port, path, headers in ((nginx_port, "/hit/obj.bin", None), (daemon.public_port, "/hit/obj.bin", host)):
        load(port, path, 8, 1.0, headers, tool="wrk")   # warm-up
    cells = {
        "nginx_hit_c32": (nginx_pid, nginx_port, "/hit/obj.bin", None, 32),
        "node_hit_c32": (daemon.pid, daemon.public_port, "/hit/obj.bin", host, 32),
        "nginx_miss_c32": (nginx_pid, nginx_port, "/miss/obj.bin", None, 32),
        "node_miss_c32": (daemon.pid, daemon.public_port, "/miss/obj.bin", host, 32),
        "nginx_reval_c32": (nginx_pid, nginx_port, "/", None, 32, walk),
    }
    if node_reval:
        cells["node_reval_c32"] = (daemon.pid, daemon.public_port, "/", host, 32, walk)
    figures = run_cells(cells, args.duration, args.rounds)
    load_after = loadavg()
    print_figures(figures, f"10 KB object, keep-alive, wrk -t1; {args.duration:g} s per run in {args.rounds} "
                           "interleaved slices; origin: nginx static", load_before, load_after)
    ratios = {}
    for kind in ("hit", "miss", "reval"):
        node, nginx = figures.get(f"node_{kind}_c32"), figures[f"nginx_{kind}_c32"]
        if node is None:
            print(f"{kind:<6} node / nginx: not measured (this node has no cache_mode \"origin\")")
            continue
        ratios[kind] = {"rps": node["rps"] / nginx["rps"], "cpu": node["cpu_us"] / nginx["cpu_us"]}
        print(f"{kind:<6} node / nginx: requests/s {ratios[kind]['rps']:.1%}, CPU per request "
              f"{ratios[kind]['cpu']:.2f} x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"figures": figures, "ratios": ratios, "loadavg": [load_before, load_after]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
