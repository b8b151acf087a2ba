"""Run every bench/bench_*.py script, one after another, each in its own process.

    python bench/run.py [--only NAME ...] [--timeout SECONDS] [--list]

Each script's output is passed through as it runs, under a header naming it.
The exit status is 0 when every script exited 0, else 1 (a list of the failed
scripts ends the output). A script still running after --timeout seconds is
ended (its whole process group) and counted as failed. Scripts are found by
name, so a new bench_<area>.py is picked up without touching this file.
"""

import argparse
import glob
import os
import signal
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)


def scripts(only=None) -> list:
    found = sorted(glob.glob(os.path.join(BENCH, "bench_*.py")))
    if only:
        wanted = {n.removesuffix(".py").removeprefix("bench_") for n in only}
        found = [p for p in found if os.path.basename(p)[6:-3] in wanted]
    return found


def run_one(path: str, timeout: float) -> int:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, path], cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"\n{os.path.basename(path)}: still running after {timeout:g} s; ending it", flush=True)
        _end_group(proc)
        return -1
    except BaseException:  # Ctrl-C, or SIGTERM (see main): end the script and its servers too
        _end_group(proc)
        raise


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM the script's process group (it cleans up its servers), SIGKILL if it lingers."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these (e.g. spine rules)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds allowed per script (default 1800)")
    parser.add_argument("--list", action="store_true", help="list the scripts and exit")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _terminated)
    found = scripts(args.only)
    if args.list:
        print("\n".join(os.path.relpath(p, ROOT) for p in found))
        return 0
    if not found:
        print("no bench/bench_*.py script found" + (f" for {args.only}" if args.only else ""))
        return 1
    failed = []
    for path in found:
        name = os.path.relpath(path, ROOT)
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        code = run_one(path, args.timeout)
        print(f"=== {name}: exit {code}, {time.monotonic() - started:.0f} s ===", flush=True)
        if code != 0:
            failed.append(f"{name} (exit {code})")
    if failed:
        print("\nfailed: " + ", ".join(failed))
        return 1
    print(f"\nall {len(found)} benchmark script(s) ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
