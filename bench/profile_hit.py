"""Where a cache hit's CPU goes: cProfile in every connection thread of a real daemon.

Timed figures move with the machine's load; a profile's call counts and its
share of time per function move far less, so this is the tool for finding the
hot spots of the hit path (bench_content.py measures the result). The daemon
runs as `contentnode serve` does, except that each serving thread (a public
listener's loop and pool threads, an admin connection's thread) runs under
its own cProfile.Profile; the profiles are merged and written when the run
ends. wrk drives --connections keep-alive connections at /hit/obj.bin (10 KB,
cached) for --duration seconds.

    python bench/profile_hit.py [--duration 5] [--connections 1] [--size 10240] [--top 30]
                                [--timer cpu|wall] [--log-level info] [--mode profile|plain|syscalls]

--mode syscalls counts the daemon's system calls per request with strace: a
hit held in memory, answered by the public listener's loop thread, costs one
recvfrom, one sendto and one epoll_ctl; the futex calls per request show how
many GIL handoffs between threads the answers made by pool threads take.

--mode trace counts what the public listener's loop thread runs per hit
(every `_wake`, which answers a hit held in memory): bytecodes, Python calls
and calls into C, over --requests sequential requests on one keep-alive
connection, and the functions that run the most bytecodes. The counts do not
move with the machine's load, so two trees compare in one run each.

CPU per request (daemon user+system time over the requests answered) is shown
with and without the profiler's own overhead, so two runs can be compared.
"""

import argparse
import collections
import cProfile
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from common import Daemon, install_cleanup, load, loadavg, temp_dir  # noqa: E402


def profiled_serve(stats_path: str, timer: str, argv: list) -> int:
    """`contentnode serve` with a cProfile.Profile per serving thread, merged on SIGUSR2."""
    from contentnode.cli import main
    from contentnode.http.parking import ParkingServer
    from contentnode.http.pool import Pool
    from contentnode.http.server import Server

    profiles, lock = [], threading.Lock()

    def dump(*_):
        with lock:
            taken = list(profiles)
        merged = None
        for profile in taken:
            profile.create_stats()
            if not profile.stats:
                continue
            if merged is None:
                merged = pstats.Stats(profile)
            else:
                merged.add(profile)
        if merged is not None:
            merged.dump_stats(stats_path)

    def profiled(plain):
        """`plain` (a thread's whole run) under a cProfile.Profile of its own."""
        def run(*args, **kwargs):
            profile = cProfile.Profile(time.thread_time) if timer == "cpu" else cProfile.Profile()
            with lock:
                profiles.append(profile)
            profile.enable()
            try:
                return plain(*args, **kwargs)
            finally:
                profile.disable()
        return run

    if timer == "trace":
        return traced_serve(stats_path, argv)
    Server._work = profiled(Server._work)   # the admin listener: a thread per connection
    # the public listeners (http/parking.py): the loop thread and each pool thread
    ParkingServer.serve_forever = profiled(ParkingServer.serve_forever)
    Pool._run = profiled(Pool._run)
    signal.signal(signal.SIGUSR2, dump)
    return main(argv)


def traced_serve(counts_path: str, argv: list) -> int:
    """`contentnode serve` counting the bytecodes and calls of each ParkingServer._wake (the loop
    thread's turn for a woken connection); written as JSON to counts_path on SIGUSR2."""
    from contentnode.cli import main
    from contentnode.http.parking import ParkingServer

    totals = {"wakes": 0, "bytecodes": 0, "calls": 0, "c_calls": 0}
    per_function: collections.Counter = collections.Counter()   # bytecodes run in each function
    called: collections.Counter = collections.Counter()         # calls of each function

    def trace(frame, event, _arg):
        if event == "call":
            totals["calls"] += 1
            called[_where(frame.f_code)] += 1
            frame.f_trace_opcodes = True
        elif event == "opcode":
            totals["bytecodes"] += 1
            per_function[_where(frame.f_code)] += 1
        return trace

    def profile(_frame, event, _arg):
        if event == "c_call":
            totals["c_calls"] += 1

    plain = ParkingServer._wake

    def wake(self, fd):
        totals["wakes"] += 1
        sys.settrace(trace)
        sys.setprofile(profile)
        try:
            return plain(self, fd)
        finally:
            sys.setprofile(None)
            sys.settrace(None)

    def dump(*_):
        with open(counts_path + ".tmp", "w") as f:
            json.dump({"totals": totals, "functions": [(name, opcodes, called[name])
                                                       for name, opcodes in per_function.most_common(60)]}, f)
        os.replace(counts_path + ".tmp", counts_path)

    def reset(*_):
        for key in totals:
            totals[key] = 0
        per_function.clear()
        called.clear()

    ParkingServer._wake = wake
    signal.signal(signal.SIGUSR2, dump)
    signal.signal(signal.SIGUSR1, reset)
    return main(argv)


def _where(code) -> str:
    return f"{os.path.basename(code.co_filename)}:{code.co_qualname}"


def sequential(port: int, path: str, count: int) -> int:
    """`count` GET requests one after the other on one keep-alive connection; the answers that were 200."""
    import http.client
    from bench_content import HOST
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ok = 0
    for _ in range(count):
        conn.request("GET", path, headers={"Host": HOST})
        answer = conn.getresponse()
        answer.read()
        ok += answer.status == 200
    conn.close()
    return ok


def wait_for(path: str) -> None:
    for _ in range(200):
        if os.path.exists(path):
            return
        threading.Event().wait(0.05)
    raise RuntimeError(f"{path} was not written")


def cpu_split(pid: int) -> tuple:
    """(user, system) CPU seconds a process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


class ProfiledDaemon(Daemon):
    def __init__(self, workdir: str, stats_path: str, timer: str, **kwargs):
        super().__init__(workdir, **kwargs)
        self.stats_path = stats_path
        self.timer = timer

    def _cmd(self, admin_port: int, public_port: int) -> list:
        return [sys.executable, os.path.abspath(__file__), "serve", self.stats_path, self.timer] + super()._cmd(
            admin_port, public_port)[3:]


def start_strace(pid: int, out_path: str) -> subprocess.Popen:
    """`strace -c -f` attached to every thread of pid, its summary to out_path when ended."""
    if shutil.which("strace") is None:
        raise RuntimeError("strace is not installed (apt-get install strace)")
    tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out_path, "-p", str(pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    threading.Event().wait(1.0)   # attached to every thread before the load starts
    return tracer


def print_syscalls(path: str, requests: int) -> None:
    """System calls per request from strace's summary, the most frequent first."""
    rows = []
    with open(path) as f:
        for line in f:
            words = line.split()
            if len(words) >= 5 and words[3].isdigit() and words[-1] != "total":
                rows.append((int(words[3]), words[-1]))
    rows.sort(reverse=True)
    total = sum(calls for calls, _ in rows)
    print(f"system calls per request (under strace, which slows every call): {total / requests:.2f}; "
          + ", ".join(f"{name} {calls / requests:.2f}" for calls, name in rows[:6]))


def main() -> int:
    from bench_content import HOST, start_node
    from tests.peers.seaweed import SeaweedS3

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--size", type=int, default=10 * 1024, help="object bytes (default 10240)")
    parser.add_argument("--top", type=int, default=30, help="functions shown (default 30)")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (default tottime)")
    parser.add_argument("--timer", choices=("wall", "cpu"), default="cpu",
                        help="cpu: each thread's own CPU time (default); wall: includes waits for the GIL")
    parser.add_argument("--log-level", default="warning",
                        help="the daemon's log_level; info writes access lines (the default config) "
                             "(default warning, as bench_content.py)")
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests counted (--mode trace)")
    parser.add_argument("--mode", choices=("profile", "plain", "syscalls", "trace"), default="profile",
                        help="profile: cProfile (default); plain: CPU per request only; syscalls: "
                             "`strace -c -f` on the daemon, system calls per request (futex: GIL handoffs); "
                             "trace: bytecodes and calls per hit on the loop thread")
    args = parser.parse_args()
    install_cleanup()
    workdir = temp_dir("contentnode-bench-profile-")
    stats_path = os.path.join(workdir, "hit.pstats")
    syscalls_path = os.path.join(workdir, "syscalls.txt")
    seaweed = SeaweedS3(temp_dir("contentnode-bench-weed-")).start()
    try:
        factory = Daemon if args.mode not in ("profile", "trace") else (
            lambda wd, **kw: ProfiledDaemon(wd, stats_path, "trace" if args.mode == "trace" else args.timer, **kw))
        daemon = start_node(seaweed, os.urandom(args.size), os.urandom(1024), daemon_factory=factory,
                            log_level=args.log_level)
        if args.mode == "trace":
            sequential(daemon.public_port, "/hit/obj.bin", 200)   # warm-up
            os.kill(daemon.pid, signal.SIGUSR1)
            threading.Event().wait(0.2)
            ok = sequential(daemon.public_port, "/hit/obj.bin", args.requests)
            os.kill(daemon.pid, signal.SIGUSR2)
            wait_for(stats_path)
            with open(stats_path) as f:
                counted = json.load(f)
            per = max(1, ok)
            print(f"{ok} sequential hits of {args.size} bytes answered 200; per hit on the loop thread: "
                  + ", ".join(f"{key} {value / per:.1f}" for key, value in counted["totals"].items()))
            print("bytecodes  calls  function (per hit)")
            for name, opcodes, calls in counted["functions"][:args.top]:
                print(f"{opcodes / per:9.1f} {calls / per:6.1f}  {name}")
            return 0
        load(daemon.public_port, "/hit/obj.bin", args.connections, 1.0, {"Host": HOST}, tool="wrk")  # warm-up
        before = loadavg()
        tracer = start_strace(daemon.pid, syscalls_path) if args.mode == "syscalls" else None
        user0, system0 = cpu_split(daemon.pid)
        run = load(daemon.public_port, "/hit/obj.bin", args.connections, args.duration, {"Host": HOST}, tool="wrk")
        user1, system1 = cpu_split(daemon.pid)
        if tracer is not None:
            tracer.terminate()
            tracer.wait(10)
        if args.mode == "profile":
            os.kill(daemon.pid, signal.SIGUSR2)
            for _ in range(200):
                if os.path.exists(stats_path):
                    break
                threading.Event().wait(0.05)
    finally:
        seaweed.close()
    count = max(1, run["requests"])
    print(f"{args.connections} connections, {args.duration:g} s, {run['requests']} requests, "
          f"{run['rps']:.0f} req/s, p50 {run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms, "
          f"errors {run['errors']}; daemon CPU us/request: user {(user1 - user0) / count * 1e6:.1f} + system "
          f"{(system1 - system0) / count * 1e6:.1f}{'' if args.mode == 'plain' else ' (' + args.mode + ')'}; "
          f"load average {before:.1f}")
    if args.mode == "syscalls":
        print_syscalls(syscalls_path, count)
    if args.mode == "profile":
        stats = pstats.Stats(stats_path)
        stats.sort_stats(args.sort).print_stats(args.top)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "serve":
        sys.exit(profiled_serve(sys.argv[2], sys.argv[3], sys.argv[4:]))
    sys.exit(main())
