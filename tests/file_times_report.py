"""Rank the lines `pytest --file-times=PATH` wrote: python tests/file_times_report.py PATH [N].

Two tables of the N (20) first files: by CPU (the pytest process, its reaped children and the
CPU its live children gained), and by waiting (wall minus that CPU: sleeps, polls, peers' work
elsewhere and, on a loaded machine, the run queue); then each worker's totals.
"""

import json
import sys


def load(path: str) -> tuple[list, list]:
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    for line in lines:
        line["cpu"] = line["cpu_self"] + line["cpu_reaped"] + line["cpu_live"]
        line["waiting"] = line["wall"] - line["cpu"]
    return [x for x in lines if x["file"]], [x for x in lines if not x["file"]]


def table(title: str, rows: list, key: str, count: int) -> None:
    total = sum(r[key] for r in rows)
    print(f"\n{title} (all files: {total:.0f} s)")
    print(f"{'file':34} {'tests':>5} {'wall':>7} {'cpu':>7} {'self':>6} {'kids':>6} {'wait':>7} "
          f"{'serve':>5} {'cli':>4} {'inproc':>6} {'other':>5}")
    for r in sorted(rows, key=lambda r: -r[key])[:count]:
        print(f"{r['file']:34} {r['tests']:5} {r['wall']:7.1f} {r['cpu']:7.1f} {r['cpu_self']:6.1f} "
              f"{r['cpu_reaped'] + r['cpu_live']:6.1f} {r['waiting']:7.1f} {r['serve']:5} {r['cli']:4} "
              f"{r['in_process']:6} {r['other']:5}")


def main(path: str, count: int = 20) -> None:
    files, workers = load(path)
    table("by CPU", files, "cpu", count)
    table("by waiting (wall - CPU)", files, "waiting", count)
    print("\nworkers (whole process: start-up, collection, session fixtures included)")
    for w in sorted(workers, key=lambda w: w["worker"]):
        print(f"{w['worker']:6} wall {w['wall']:7.1f}  cpu {w['cpu']:7.1f} (self {w['cpu_self']:.1f}, "
              f"reaped {w['cpu_reaped']:.1f}, live {w['cpu_live']:.1f})")
    print(f"files' processes: serve {sum(r['serve'] for r in files)}, cli {sum(r['cli'] for r in files)}, "
          f"in-process {sum(r['in_process'] for r in files)}, other {sum(r['other'] for r in files)}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
