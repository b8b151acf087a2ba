"""Instructions per request, counted under callgrind: issue 34's two CPU goals without the load's scatter.

The timed benches (bench_edge.py, bench_traffic.py) divide the daemon's CPU time by its answers;
on a shared machine that moves between runs as much as the goals' margins. Here the daemon runs
under `valgrind --tool=callgrind --instr-atstart=no` (started, set up and warmed uninstrumented),
then, for each measured window: `callgrind_control --zero`, N sequential 10 KB cache hits on one
keep-alive connection, `callgrind_control --dump`; the dump's instructions (Ir, per thread:
`--separate-threads=yes`) over N are the figures: of the whole process, and of its busiest thread
(the public listener's loop thread, which answers these hits). Start-up and warm-up are outside
every window. Each name's figure is the median of its --repeats windows; the windows are printed
beside it. Instruction counts do not depend on the machine's load (callgrind runs the threads one
at a time); they are not time either (a cache miss or a system call counts as its instructions
only), so they judge Python work, which is what the edge members and the counting add. What is
left between windows of the same work (about +-2 % of the process's count, half that of the
answering thread's) is time-driven: the daemon's timer threads (a window of 5 s with no request,
`idle`, shows their rate) and how often the loop thread wakes or waits for the GIL.

- edge: one daemon (bench_edge.py's node: one public process, a country MMDB file) with the rules
  of bench_edge.py (plain, edge = access + rate_limit + headers, edge_countries) and each edge
  member alone (access, rate_limit, headers), every rule's window taken --repeats times in
  rotating order; goal edge / plain <= 1.10.
- traffic: bench_traffic.py's two daemons (counting as shipped, and "without": the counting
  call a no-op), 10 KB hits over --paths distinct objects with a query string, windows
  alternating; goal counting / without <= 1.05. A request only appends its raw row to two
  queues; the top summaries fold the rows every 20,000 requests or when the top is read (the
  tail shapes its rows only when it is read, dropping all but the last 1,000 otherwise), so each
  window ends with GET /api/traffic/top on both daemons, and the count of a second such read
  right after (the read's own cost, nothing left to fold) is taken off: the counting side's
  process figure holds the fold of its rows. The answering thread's figure holds no fold (the
  admin API's thread reads).

- miss (only when asked): calls_per_hit.py's origin-mode memory hit (/hit) and no-store miss (/miss,
  the nginx origin's /nostore/ path: asked over a kept-alive connection, nothing stored) on one
  daemon, windows alternating; then one more window of each whose per-thread dumps are kept
  (--keep) and printed by thread: its top functions by their own instructions and the C entry
  points the bytecode called (regular expressions, hashing, GIL, sockets, str.lower, int(), ...)
  by inclusive instructions. Python frames all show as _PyEval_EvalFrameDefault; a miss runs on a
  pool thread (its busiest) after the listener's loop thread has parsed it and found no memory answer.

    python bench/bench_instructions.py [--hits 300] [--repeats 3] [--only edge|traffic|miss] [--json FILE] [--strict]
    python bench/bench_instructions.py --only miss [--top 25] [--keep DIR]

Needs valgrind (Debian's package). About 10 minutes with the defaults on a quiet 2-CPU machine.
Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import functools
import glob
import http.client
import json
import os
import re
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

import bench_edge  # noqa: E402
import bench_traffic  # noqa: E402
from common import HOST, Daemon, install_cleanup, median, temp_dir  # noqa: E402

from tests.peers.seaweed import SeaweedS3  # noqa: E402

START_TIMEOUT = 600.0   # seconds: the interpreter's start under valgrind
EDGE_RULES = dict(bench_edge.RULES, **{member: {member: bench_edge.EDGE[member]}
                                       for member in ("access", "rate_limit", "headers")})


class Counted:
    """A daemon run under callgrind with instrumentation off until the first measured window."""

    def _cmd(self, admin_port: int, public_port: int) -> list:
        out = os.path.join(self.workdir, "callgrind.out")
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                f"--callgrind-out-file={out}",
                *super()._cmd(admin_port, public_port)]

    def control(self, *options: str) -> None:
        subprocess.run(["callgrind_control", *options, str(self.pid)], check=True, timeout=300,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def counted(self, work, keep: str | None = None) -> dict:
        """The instructions each thread of the process runs while `work()` runs (zeroed before,
        dumped after): {callgrind's thread number: instructions}. The dump files are moved into
        `keep` when given (for callgrind_annotate), else removed."""
        before = set(glob.glob(os.path.join(self.workdir, "callgrind.out*")))
        self.control("--zero")
        work()
        self.control("--dump")
        made = sorted(set(glob.glob(os.path.join(self.workdir, "callgrind.out*"))) - before)
        totals = {}
        for path in made:
            with open(path) as f:
                text = f.read()
            found = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
            thread = re.search(r"^thread: (\d+)", text, re.M)
            totals[int(thread.group(1))] = int(found.group(1))
            if keep:
                os.replace(path, os.path.join(keep, f"{os.path.basename(path)}.t{thread.group(1)}"))
            else:
                os.unlink(path)
        return totals


class CountedDaemon(Counted, Daemon):
    pass


class CountedLaunched(Counted, bench_traffic.LaunchedDaemon):
    pass


def read_top(daemon) -> None:
    """GET /api/traffic/top for the bench's domain: the rows counted since the last read are folded
    into the top summaries first (the counting's deferred work)."""
    bench_traffic.api(daemon, "GET", f"/api/traffic/top?domain={bench_traffic.HOST}")


def hits(port: int, paths: list, n: int) -> None:
    """n sequential GETs on one keep-alive connection, cycling through paths; each must be a 200."""
    conn = http.client.HTTPConnection(HOST, port, timeout=120)
    try:
        for i in range(n):
            conn.request("GET", paths[i % len(paths)], headers={"Host": bench_edge.HOST})
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise RuntimeError(f"{paths[i % len(paths)]} answered {answer.status}")
    finally:
        conn.close()


def windows(daemons: dict, n: int, repeats: int, after=None) -> dict:
    """name -> {"process": [...], "thread": [...]}, instructions per hit of each window, of the whole
    process and of its busiest thread (the listener's loop thread, which answers these hits);
    daemons: name -> (daemon, port, paths), warmed by n hits each with instrumentation on, then
    taken in rotating order. `after(daemon)`, when given, runs at the end of each window, and once
    more in a window of its own right after, whose count the figures leave out (what `after` costs
    with nothing new to do)."""
    for daemon in {id(d): d for d, _, _ in daemons.values()}.values():
        daemon.control("--instr=on")
    for _, port, paths in daemons.values():
        hits(port, paths, n)
    names = list(daemons)
    got = {name: {"process": [], "thread": []} for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            daemon, port, paths = daemons[name]

            def work(daemon=daemon, port=port, paths=paths):
                hits(port, paths, n)
                if after:
                    after(daemon)
            threads = daemon.counted(work)
            again = sum(daemon.counted(functools.partial(after, daemon)).values()) if after else 0
            got[name]["process"].append((sum(threads.values()) - again) / n)
            got[name]["thread"].append(max(threads.values()) / n)
            print(".", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return got


def idle(daemon, seconds: float) -> int:
    """The instructions of the daemon's own timers over `seconds` with no request."""
    return sum(daemon.counted(lambda: time.sleep(seconds)).values())


def report(got: dict, base: str, goal: float, heading: str) -> dict:
    """Print per name the median instructions per hit over the windows (of the process, and of the
    thread answering) and the ratio to base; the windows' own figures beside them."""
    print(heading)
    out = {"windows": got, "base": base, "goal": goal}
    for scope in ("process", "thread"):
        mid = out[scope] = {name: median(v[scope]) for name, v in got.items()}
        print(f"  {scope:<16}{'instr/hit':>11}{'+ vs ' + base:>14}{'ratio':>8}   windows")
        for name, values in got.items():
            print(f"  {name:<16}{mid[name]:>11,.0f}{mid[name] - mid[base]:>+14,.0f}{mid[name] / mid[base]:>8.3f}"
                  f"   {', '.join(f'{v:,.0f}' for v in values[scope])}")
    return out


def edge(n: int, repeats: int) -> dict:
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    try:
        daemon = bench_edge.start_node(seaweed, os.urandom(bench_edge.SIZE), EDGE_RULES, CountedDaemon,
                                       timeout=START_TIMEOUT)
        cells = {name: (daemon, daemon.public_port, [f"/{name}/obj.bin"]) for name in EDGE_RULES}
        got = windows(cells, n, repeats)
        quiet = idle(daemon, 5.0)
        daemon.stop()
    finally:
        seaweed.close()
    out = report(got, "plain", bench_edge.GOAL,
                 f"edge: {n} sequential {bench_edge.SIZE}-byte hits per window, {repeats} windows per rule "
                 f"(medians of the windows)")
    print(f"  idle daemon: {quiet:,} instructions in 5 s")
    out["idle_5s"] = quiet
    return out


def traffic(n: int, repeats: int, paths: int) -> dict:
    work = temp_dir()
    daemons = {}
    for name in ("counting", "without"):
        daemon = daemons[name] = CountedLaunched(os.path.join(work, name), name == "counting")
        os.makedirs(daemon.workdir)
        daemon.start(timeout=START_TIMEOUT)
        bench_traffic.prepare(daemon, paths)
    targets = [f"/o/{i % paths}.bin?v={i}" for i in range(n)]
    got = windows({name: (d, d.public_port, targets) for name, d in daemons.items()}, n, repeats, read_top)
    for daemon in daemons.values():
        daemon.stop()
    return report(got, "without", bench_traffic.GOAL,
                  f"traffic: {n} sequential {bench_traffic.SIZE}-byte hits per window over {paths} paths "
                  f"(with a query string), then the top read (a second read's count taken off); {repeats} windows per daemon "
                  f"(medians of the windows)")


# C entry points whose inclusive cost is shown per thread: Python's own frames all show as
# _PyEval_EvalFrameDefault, these say what the bytecode called (regular expressions, hashing, the GIL,
# sockets, exceptions, str.lower, int(), decoding)
_ENTRIES = re.compile(r":(_sre_SRE_Pattern_\w+|EVP_hexdigest|take_gil|drop_gil|PyThread_acquire_lock_timed|sock_\w+|"
                      r"select_\w+|_PyErr_CreateException|PyUnicode_FromFormatV|unicode_lower|_Py_bytes_lower|"
                      r"PyLong_FromString|PyUnicode_Decode|gc_collect_main) ")


def _annotate(path: str, top: int) -> list:
    """One thread's dump: its `top` functions by their own instructions, then the C entry points
    (_ENTRIES) by inclusive instructions: [(instructions, "self"|"incl", name)]."""
    rows = []
    for kind, options in (("self", []), ("incl", ["--inclusive=yes"])):
        text = subprocess.run(["callgrind_annotate", "--threshold=100", *options, path],
                              capture_output=True, text=True, check=True, timeout=600).stdout
        total, found_rows = None, []
        for line in text.splitlines():
            found = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S.*)$", line)
            if not found:
                continue
            cost, name = int(found.group(1).replace(",", "")), re.sub(r" \[/.*\]$", "", found.group(2))
            name = re.sub(r"^.*/", "", name)   # file:function, the build's directories left out
            if "PROGRAM TOTALS" in name:
                total = cost
            elif cost != total and (kind == "self" or _ENTRIES.search(name + " ")
                                                          and "/Include/" not in found.group(2) and ".c.h:" not in name):
                found_rows.append((cost, kind, name))   # (the thread's root frames carry its total)
        rows += found_rows[:top] if kind == "self" else found_rows
    return rows


def miss(n: int, repeats: int, top: int, keep: str) -> dict:
    """The origin's no-store miss against the origin-mode memory hit (calls_per_hit.py's two rules
    on one daemon); then one more window of each with its dumps kept in `keep`, whose threads, top
    functions by their own instructions and C entry points by inclusive ones are printed."""
    import calls_per_hit
    from bench_content import start_nginx
    _, origin_port, _ = start_nginx({"obj.bin": os.urandom(calls_per_hit.SIZE)}, calls_per_hit._FRESH_CONF)
    daemon = CountedDaemon(temp_dir(), log_level="warning").start(timeout=START_TIMEOUT)
    daemon.setup_admin()
    root = bench_traffic.api(daemon, "POST", "/api/buckets", {"name": "origin", "type": "http",
                                                              "url": f"http://{HOST}:{origin_port}"})
    bench_traffic.api(daemon, "POST", "/api/domains", {"host": bench_edge.HOST})
    for path, prefix in (("/hit", "fresh/"), ("/miss", "nostore/")):
        bench_traffic.api(daemon, "POST", "/api/rules", {"domain": bench_edge.HOST, "path": path, "bucket": root["id"],
                                                         "cache_ttl": 3600, "cache_mode": "origin", "prefix": prefix})
    cells = {name: (daemon, daemon.public_port, [f"/{name}/obj.bin"]) for name in ("hit", "miss")}
    got = windows(cells, n, repeats)
    out = report(got, "hit", 0.0, f"origin: {n} sequential {calls_per_hit.SIZE}-byte requests per window, "
                                   f"{repeats} windows each (medians of the windows)")
    os.makedirs(keep, exist_ok=True)
    out["threads"] = {}
    for name in cells:
        where = os.path.join(keep, name)
        os.makedirs(where, exist_ok=True)
        threads = daemon.counted(functools.partial(hits, daemon.public_port, cells[name][2], n), keep=where)
        out["threads"][name] = {t: v / n for t, v in threads.items()}
        print(f"  {name}: instructions per request by thread (kept in {where}):")
        for thread, value in sorted(threads.items(), key=lambda item: -item[1]):
            print(f"    thread {thread:>3}{value / n:>12,.0f}")
            if top and value / n >= 1000:
                dump = glob.glob(os.path.join(where, f"*.t{thread}"))[0]
                for cost, kind, function in _annotate(dump, top):
                    if cost >= 500 * n:
                        print(f"        {cost / n:>12,.0f} {kind}  {function}")
    daemon.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=300, help="hits per window (default 300)")
    parser.add_argument("--repeats", type=int, default=3, help="windows per rule or daemon (default 3)")
    parser.add_argument("--paths", type=int, default=100, help="traffic: distinct objects (default 100)")
    parser.add_argument("--only", choices=("edge", "traffic", "miss"),
                        help="miss: only when asked (the origin's no-store miss against its memory hit)")
    parser.add_argument("--top", type=int, default=25, help="miss: functions shown per thread (default 25)")
    parser.add_argument("--keep", default=None, help="miss: keep the per-thread dumps here (default a temp dir)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed")
    args = parser.parse_args()
    install_cleanup()
    figures, met = {}, True
    if args.only == "miss":
        figures["miss"] = miss(args.hits, args.repeats, args.top, args.keep or temp_dir("contentnode-bench-cg-"))
    for part, (base, name) in (("edge", ("plain", "edge")), ("traffic", ("without", "counting"))):
        if args.only in (None, part):
            fig = figures[part] = edge(args.hits, args.repeats) if part == "edge" else \
                traffic(args.hits, args.repeats, args.paths)
            ratio = fig["ratio"] = fig["process"][name] / fig["process"][base]
            ok = ratio <= fig["goal"]
            met &= ok
            print(f"  {name} / {base}, the process's median instructions per hit: {ratio:.3f} "
                  f"(goal <= {fig['goal']:.2f}: {'met' if ok else 'MISSED'}); "
                  f"of the answering thread: {fig['thread'][name] / fig['thread'][base]:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return int(args.strict and not met)


if __name__ == "__main__":
    sys.exit(main())
