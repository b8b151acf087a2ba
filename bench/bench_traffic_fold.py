"""Instructions per request of traffic insight's fold (core/traffic_top.py), counted under callgrind.

bench_instructions.py counts a whole daemon; this counts the fold alone, in a loop, in seconds:
the script runs itself under `valgrind --tool=callgrind` twice, once recording --rows raw rows
(the request path's record() call included) into the daemon's TrafficTop and folding them into
its minute summaries (an hour is built from them only when asked for) every 300 rows (what a top
read or a save does first: take_pending, which on the daemon folds and hands nothing on), and once
with no row; the difference over --rows is the figure.
Instruction counts do not depend on the machine's load.

- bench: the rows of bench_instructions.py's traffic part slowed by callgrind: one client, 100
  paths in turn, no referer, a new second every PER_SECOND rows (so no two rows are alike);
- distinct: a new path, client address and referer for every row (the worst case: nothing folds
  together in any dimension but the status, cache and country).

Both runs make the same rows; only the recording and folding differ.

    python bench/bench_traffic_fold.py [--rows 3000] [--mix bench|distinct|both]

Needs valgrind (Debian's package). Nothing is started but the two interpreters.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = 1_700_000_000 - 1_700_000_000 % 3600
WINDOW = 300      # rows folded together, as a top read after each of bench_instructions.py's windows
PER_SECOND = 50   # rows a second: about the hits a second bench_instructions.py's daemon answers


def row(mix: str, i: int) -> tuple:
    if mix == "bench":
        return (T0 + i // PER_SECOND, "bench.example", "GET", f"/obj/{i % 100}.bin", 200, 10240, "hit", "127.0.0.1", None, None)
    return (T0 + i // PER_SECOND, "bench.example", "GET", f"/p/{i}.bin", 200, 10240 + i % 7, "miss",
            f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", f"https://r{i}.example/x", None)


def fold(mix: str, made: int, count: int) -> None:
    """The measured work (run under callgrind): `made` rows made, `count` of them recorded and
    folded WINDOW at a time."""
    sys.path.insert(0, ROOT)
    from contentnode.core.traffic_top import TrafficTop

    rows = [row(mix, i) for i in range(made)]
    now = float(T0 + made // PER_SECOND)
    top = TrafficTop(os.path.join(tempfile.mkdtemp(), "top.json"), lambda: now, lambda: "truncated")
    for start in range(0, count, WINDOW):
        for one in rows[start:start + WINDOW]:
            top.record(one)
        top.take_pending()


def counted(mix: str, made: int, count: int, env: dict) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                          sys.executable, os.path.abspath(__file__), "--run", mix, str(made), str(count)],
                         capture_output=True, text=True, check=True, timeout=1800, env=env)
    return int(re.search(r"Collected : (\d+)", out.stderr).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--mix", choices=("bench", "distinct", "both"), default="both")
    parser.add_argument("--run", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        fold(args.run[0], int(args.run[1]), int(args.run[2]))
        return
    # compiled modules kept (in a temporary folder) and the first run's compiling not counted: with no
    # bytecode written, each run compiles every module, which moves the count by millions between runs
    env = {**os.environ, "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(), "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    counted(args.mix if args.mix != "both" else "bench", 10, 10, env)
    for mix in ("bench", "distinct") if args.mix == "both" else (args.mix,):
        base, work = counted(mix, args.rows, 0, env), counted(mix, args.rows, args.rows, env)
        print(f"{mix}: {(work - base) / args.rows:,.0f} instructions per row "
              f"({args.rows} rows: {work:,}; none: {base:,})")


if __name__ == "__main__":
    main()
