"""Function calls per memory hit, counted (not timed): the figure other load cannot move.

Timed figures (bench_origin.py, bench_content.py) move with whatever else runs
on the machine. This tool runs a real daemon with every serving thread under
cProfile (profile_hit.py's daemon), asks one 10 KB object N times, then 2N
times in a second daemon, over one kept-alive connection, and prints the
difference of the profiles' call counts over N: the Python and C function
calls one hit costs, start-up and warm-up removed.

- origin: a rule in cache_mode "origin" on an http bucket (a static nginx
  origin with ETag and Last-Modified), the answer held in memory and fresh.
- s3: a fixed-TTL rule on an S3 bucket (SeaweedFS), the same object size.

    python bench/calls_per_hit.py [--kind origin|s3|both] [--requests 2000]
"""

import argparse
import http.client
import os
import signal
import sys
import threading

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import HOST, api, start_nginx  # noqa: E402
from bench_origin import _ORIGIN_CONF  # noqa: E402
from common import install_cleanup, temp_dir  # noqa: E402
from profile_hit import ProfiledDaemon  # noqa: E402

SIZE = 10 * 1024
WARM = 50


def _origin_node(factory, origin_port: int):
    daemon = factory(temp_dir(), log_level="warning").start()
    daemon.setup_admin()
    root = api(daemon, "POST", "/api/buckets", {"name": "origin", "type": "http",
                                                "url": f"http://127.0.0.1:{origin_port}"})
    api(daemon, "POST", "/api/domains", {"host": HOST})
    api(daemon, "POST", "/api/rules", {"domain": HOST, "path": "/hit", "bucket": root["id"], "cache_ttl": 3600})
    return daemon


def _ask(port: int, count: int) -> None:
    """`count` GETs of /hit/obj.bin on one kept-alive connection, each a 200 of SIZE bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for _ in range(count):
            conn.request("GET", "/hit/obj.bin", headers={"Host": HOST})
            answer = conn.getresponse()
            body = answer.read()
            if answer.status != 200 or len(body) != SIZE:
                raise RuntimeError(f"answered {answer.status} ({len(body)} bytes)")
    finally:
        conn.close()


def _calls(start, requests: int) -> int:
    """Total calls the serving threads of a fresh daemon made for WARM + `requests` hits."""
    import pstats
    stats_path = os.path.join(temp_dir("contentnode-bench-calls-"), "hit.pstats")
    daemon = start(lambda wd, **kw: ProfiledDaemon(wd, stats_path, "cpu", **kw))
    try:
        _ask(daemon.public_port, WARM)
        _ask(daemon.public_port, requests)
        os.kill(daemon.pid, signal.SIGUSR2)
        for _ in range(200):
            if os.path.exists(stats_path):
                break
            threading.Event().wait(0.05)
        threading.Event().wait(0.3)   # the dump is written whole
        return pstats.Stats(stats_path).total_calls
    finally:
        daemon.stop()


def per_hit(start, requests: int) -> float:
    return (_calls(start, 2 * requests) - _calls(start, requests)) / requests


def main() -> int:
    from bench_content import start_node
    from tests.peers.seaweed import SeaweedS3

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("origin", "s3", "both"), default="both")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    install_cleanup()
    body = os.urandom(SIZE)
    if args.kind in ("origin", "both"):
        _, origin_port, _ = start_nginx({"obj.bin": body}, _ORIGIN_CONF)
        print(f"origin-mode memory hit: {per_hit(lambda f: _origin_node(f, origin_port), args.requests):.1f} "
              "calls per hit")
    if args.kind in ("s3", "both"):
        seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
        try:
            names = iter(range(2))   # a bucket per daemon

            def s3_node(factory):
                return start_node(seaweed, body, os.urandom(1024), bucket=f"bench{next(names)}",
                                  daemon_factory=factory)
            print(f"S3 fixed-TTL memory hit: {per_hit(s3_node, args.requests):.1f} calls per hit")
        finally:
            seaweed.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
