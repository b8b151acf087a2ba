"""Function calls per memory hit or origin miss, counted (not timed): the figure other load cannot move.

Timed figures (bench_origin.py, bench_content.py) move with whatever else runs
on the machine. This tool runs a real daemon in which each request's handling
(RequestHandler.handle_one_request: reading the head, answering, sending; and
for a miss, which the listener's loop thread parses and defers, RequestHandler.resume
on its pool thread) runs under one cProfile.Profile, enabled for that request only, so no idle
wake-up or background work is counted. It asks one 10 KB object WARM times,
reads the counts by function (SIGUSR2 writes them to a file), asks it N times more over one
kept-alive connection, reads the count again and prints the difference over
N: the Python and C function calls one request costs.

- origin: a rule in cache_mode "origin" on an http bucket (a static nginx
  origin with ETag and Last-Modified), the answer held in memory and fresh.
- s3: a fixed-TTL rule on an S3 bucket (SeaweedFS), the same object size.
- miss: a rule in cache_mode "origin" on the same origin's /nostore/ path
  (`Cache-Control: no-store`): every request asks the origin over a kept-alive
  connection and nothing is stored (bench_origin.py's miss). Counted in the
  request's own thread: the origin's wait is not a call.

    python bench/calls_per_hit.py [--kind origin|s3|miss|both] [--requests 2000] [--top 0] [--browser]
"""

import argparse
import http.client
import json
import os
import signal
import sys
import threading

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import HOST, api, start_nginx  # noqa: E402
from bench_origin import _ORIGIN_CONF  # noqa: E402
from common import Daemon, install_cleanup, temp_dir  # noqa: E402

SIZE = 10 * 1024
WARM = 50
# the origin's answer fresh for a day: a heuristic freshness (a tenth of a file's age, which is seconds
# here) would make some of the counted requests revalidations
_FRESH_CONF = _ORIGIN_CONF.replace(
    "location /reval/", 'location /fresh/ {{ add_header Cache-Control "max-age=86400"; try_files /obj.bin =404; }}'
    "\n        location /reval/")


def counted_serve(count_path: str, argv: list) -> int:
    """`contentnode serve` with every request's handling profiled; SIGUSR2 writes the calls so far."""
    import cProfile

    from contentnode.cli import main
    from contentnode.http.connection import RequestHandler

    profile = cProfile.Profile()

    def counted(plain):
        def run(self, *args):
            profile.enable()
            try:
                return plain(self, *args)
            finally:
                profile.disable()
        return run

    def dump(*_):
        counts: dict = {}
        for entry in profile.getstats():
            code = entry.code
            name = code if isinstance(code, str) else f"{code.co_filename}:{code.co_firstlineno} {code.co_name}"
            counts[name] = counts.get(name, 0) + entry.callcount
        with open(count_path + ".tmp", "w") as f:
            json.dump(counts, f)
        os.replace(count_path + ".tmp", count_path)

    # a request's handling: read and served, or (a miss) parsed on the loop thread, then served on a
    # pool thread from that head (resume)
    RequestHandler.handle_one_request = counted(RequestHandler.handle_one_request)
    RequestHandler.resume = counted(RequestHandler.resume)
    signal.signal(signal.SIGUSR2, dump)
    return main(argv)


class CountedDaemon(Daemon):
    def __init__(self, workdir: str, **kwargs):
        super().__init__(workdir, **kwargs)
        self.count_path = os.path.join(workdir, "calls")

    def _cmd(self, admin_port: int, public_port: int) -> list:
        return [sys.executable, os.path.abspath(__file__), "serve", self.count_path] + super()._cmd(
            admin_port, public_port)[3:]

    def calls(self) -> dict:
        """The calls counted so far, by function."""
        if os.path.exists(self.count_path):
            os.unlink(self.count_path)
        os.kill(self.pid, signal.SIGUSR2)
        for _ in range(200):
            if os.path.exists(self.count_path):
                with open(self.count_path) as f:
                    return json.load(f)
            threading.Event().wait(0.05)
        raise RuntimeError("the daemon wrote no count")


def _origin_node(factory, origin_port: int, prefix: str = "fresh/"):
    daemon = factory(temp_dir(), log_level="warning").start()
    daemon.setup_admin()
    root = api(daemon, "POST", "/api/buckets", {"name": "origin", "type": "http",
                                                "url": f"http://127.0.0.1:{origin_port}"})
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": root["id"], "cache_ttl": 3600,
                                       "cache_mode": "origin", "prefix": prefix})
    return daemon


# what a browser sends with a page request (--browser): the fields each hit reads or passes over
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
           "Accept": "text/html,application/xhtml+xml,*/*;q=0.8", "Accept-Language": "en-US,en;q=0.5",
           "Accept-Encoding": "gzip, deflate, br", "Connection": "keep-alive", "Cookie": "a=1; b=2",
           "Upgrade-Insecure-Requests": "1", "Sec-Fetch-Dest": "document", "Sec-Fetch-Mode": "navigate",
           "Sec-Fetch-Site": "none", "Sec-Fetch-User": "?1", "DNT": "1"}


def _ask(port: int, count: int, fields: dict) -> None:
    """`count` GETs of /hit/obj.bin with `fields` on one kept-alive connection, each a 200 of SIZE bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(count):
            conn.request("GET", "/hit/obj.bin", headers={"Host": HOST, **fields})
            answer = conn.getresponse()
            body = answer.read()
            if answer.status != 200 or len(body) != SIZE:
                raise RuntimeError(f"answered {answer.status} ({len(body)} bytes)")
    finally:
        conn.close()


def per_hit(start, requests: int, fields: dict) -> dict:
    """Calls per hit, by function, of a daemon `start(factory)` sets up."""
    daemon = start(CountedDaemon)
    try:
        _ask(daemon.public_port, WARM, fields)
        before = daemon.calls()
        _ask(daemon.public_port, requests, fields)
        after = daemon.calls()
    finally:
        daemon.stop()
    return {name: (count - before.get(name, 0)) / requests for name, count in after.items()}


def show(label: str, calls: dict, top: int) -> None:
    print(f"{label}: {sum(calls.values()):.1f} calls per request")
    root = os.path.dirname(BENCH) + os.sep
    for name, count in sorted(calls.items(), key=lambda item: -item[1])[:top]:
        print(f"  {count:7.2f}  {name.replace(root, '')}")


def main() -> int:
    from bench_content import start_node
    from tests.peers.seaweed import SeaweedS3

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("origin", "s3", "miss", "both"), default="both",
                        help="both: origin and s3 (miss only when asked)")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--top", type=int, default=0, help="also show the functions called most per request")
    parser.add_argument("--browser", action="store_true", help="send a browser's 13 request fields, not 2")
    args = parser.parse_args()
    fields = BROWSER if args.browser else {}
    install_cleanup()
    body = os.urandom(SIZE)
    if args.kind in ("origin", "both"):
        _, origin_port, _ = start_nginx({"obj.bin": body}, _FRESH_CONF)
        show("origin-mode memory hit", per_hit(lambda f: _origin_node(f, origin_port), args.requests, fields),
             args.top)
    if args.kind == "miss":
        _, origin_port, _ = start_nginx({"obj.bin": body}, _FRESH_CONF)
        show("origin no-store miss", per_hit(lambda f: _origin_node(f, origin_port, "nostore/"), args.requests,
                                             fields), args.top)
    if args.kind in ("s3", "both"):
        seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
        try:
            def s3_node(factory):
                return start_node(seaweed, body, os.urandom(1024), daemon_factory=factory)
            show("S3 fixed-TTL memory hit", per_hit(s3_node, args.requests, fields), args.top)
        finally:
            seaweed.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        sys.exit(counted_serve(sys.argv[2], sys.argv[3:]))
    sys.exit(main())
