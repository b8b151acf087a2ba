"""The cache's own cost per hit (Cache.get on an entry already stored), in process, no HTTP.

    python bench/bench_cache.py [--hits 100000] [--rounds 7] [--against DIR]

Measures a small hit (10 KB body, answered from memory) and a large one
(1 MB, the shared open file) of this checkout's contentnode/core/cache.py,
best of --rounds, in CPU time of the measuring thread (so a busy machine moves it
little). With --against DIR (another checkout, e.g. one made with
`git worktree add /tmp/base <rev>` or `git archive <rev> | tar -x -C DIR`),
the same is measured there in a child process, rounds interleaved, and the
ratio is printed. Nothing is sent over a network; temp folders are removed.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(hits: int) -> dict:
    """Seconds per hit of the checkout on sys.path[0] (run in a child with that path)."""
    from contentnode.core.cache import Cache
    from contentnode.core.cache_fill import OriginAnswer

    folder = tempfile.mkdtemp(prefix="bench-cache-")
    try:
        cache = Cache(os.path.join(folder, "c"), 1 << 26, time.time)
        found = {}
        for name, size in (("small", 10_000), ("large", 1_000_000)):
            key = ("bench.example", f"/{name}", "")

            def origin(size=size):
                return OriginAnswer(200, {"content_type": "application/octet-stream"}, size, [b"x" * size])
            cache.get(key, origin, 600).read_all()
            cache.get(key, origin, 600).close()
            started = time.thread_time()
            for _ in range(hits):
                cache.get(key, origin, 600).close()
            found[name] = (time.thread_time() - started) / hits
        return found
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_child(checkout: str, hits: int) -> dict:
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
            "import bench_cache; print(json.dumps(bench_cache.measure(int(sys.argv[3]))))")
    out = subprocess.run([sys.executable, "-c", code, checkout, os.path.join(HERE, "bench"), str(hits)],
                         check=True, capture_output=True, text=True, timeout=600, cwd=checkout)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hits", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", help="another checkout to measure beside this one")
    args = parser.parse_args()
    sides = {"this": HERE}
    if args.against:
        sides["against"] = os.path.abspath(args.against)
    best = {side: {} for side in sides}
    for _ in range(args.rounds):
        for side, checkout in sides.items():
            for name, seconds in run_child(checkout, args.hits).items():
                best[side][name] = min(best[side].get(name, seconds), seconds)
    for name in ("small", "large"):
        line = f"{name} hit: this {best['this'][name] * 1e6:.2f} us"
        if args.against:
            theirs = best["against"][name]
            line += f", against {theirs * 1e6:.2f} us ({best['this'][name] / theirs:.2f} x)"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
