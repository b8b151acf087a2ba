"""Rule matching speed with 10, 1,000 and 10,000 rules (issue 5).

All rules sit on one host (the worst case for a scan), at depths 1 to 3; the
requests are 4 to 6 segments deep and mix hits at every depth with misses.
The per-host index should make the three figures about equal: the target is
the 10,000-rule figure within 2x of the 10-rule figure.

    python bench/bench_rules.py [--lookups N]
"""

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from contentnode.core.rules import RuleIndex  # noqa: E402

HOST = "cdn.example.com"


def make_rules(count: int, rng: random.Random) -> list:
    rules, seen = [], set()
    while len(rules) < count:
        depth = rng.randint(1, 3)
        path = "/" + "/".join(f"s{rng.randrange(count)}" for _ in range(depth))
        if path not in seen:
            seen.add(path)
            rules.append({"id": str(len(rules)), "domain": HOST, "path": path, "prefix": "p/"})
    return rules


def make_requests(rules: list, rng: random.Random, n: int = 2000) -> list:
    requests = []
    for i in range(n):
        base = rng.choice(rules)["path"] if i % 4 else "/miss%d" % i
        requests.append(base + "/" + "/".join(f"f{rng.randrange(100)}" for _ in range(rng.randint(1, 3))) + ".jpg")
    return requests


def rate(count: int, lookups: int) -> float:
    rng = random.Random(count)
    rules = make_rules(count, rng)
    index = RuleIndex(rules)
    requests = make_requests(rules, rng)
    match = index.match
    rounds = max(1, lookups // len(requests))
    started = time.perf_counter()
    for _ in range(rounds):
        for path in requests:
            match(HOST, path)
    return rounds * len(requests) / (time.perf_counter() - started)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lookups", type=int, default=400_000)
    args = parser.parse_args()
    results = {n: rate(n, args.lookups) for n in (10, 1_000, 10_000)}
    for n, r in results.items():
        print(f"{n:>6} rules: {r:>12,.0f} lookups/s")
    base = results[10]
    for n in (1_000, 10_000):
        print(f"ratio rate(10) / rate({n}): {base / results[n]:.2f} (1.00 = same speed, above 1 = slower)")
    verdict = "within" if base / results[10_000] <= 2 else "NOT within"
    print(f"10,000-rule figure is {verdict} 2x of the 10-rule figure")


if __name__ == "__main__":
    main()
