"""`pytest --file-times=PATH`: where the suite's time goes, one JSON line per test file.

The wall time of each file and the CPU it cost: this pytest process, its reaped
children (daemons are reaped at their fixture's teardown, which runs inside the
file's last test) and the CPU its live children gained meanwhile (the session's
SeaweedFS, the worker's chromium), and how many `contentnode` processes the file
started (`serve` daemons and offline commands) and in-process nodes it built.
Each xdist worker appends its own lines; tests/file_times_report.py ranks them.
Without the option nothing is measured.
"""

import json
import os
import resource
import subprocess
import time

import pytest

TICKS = os.sysconf("SC_CLK_TCK")


def pytest_addoption(parser):
    parser.addoption("--file-times", metavar="PATH", default=None,
                     help="append per test file wall time, CPU and processes started to PATH (JSON lines)")


def pytest_configure(config):
    path = config.getoption("--file-times")
    if path:
        config.pluginmanager.register(FileTimes(os.path.abspath(path)), "file-times-recorder")


def _live_children_cpu(pid: int) -> float:
    """CPU seconds of the live descendants of `pid` (with what they reaped themselves)."""
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            continue
        for child in children:
            try:
                with open(f"/proc/{child}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(v) for v in fields[11:15]) / TICKS   # utime stime cutime cstime
            total += _live_children_cpu(child)
    return total


def _sample() -> dict:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall": time.monotonic(), "self": own.ru_utime + own.ru_stime,
            "reaped": reaped.ru_utime + reaped.ru_stime, "live": _live_children_cpu(os.getpid())}


class FileTimes:
    def __init__(self, path: str):
        self.path = path
        self.files: dict = {}
        self.counts = {"serve": 0, "cli": 0, "other": 0, "in_process": 0}
        self.session_start = _sample()
        self._count_processes()

    def _count_processes(self):
        """Count the processes the tests start, by kind (Popen is patched in this process only)."""
        counts = self.counts
        original = subprocess.Popen.__init__

        def counting_init(popen, args, *rest, **kwargs):
            argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
            if "contentnode" in argv and "-m" in argv:
                counts["serve" if "serve" in argv else "cli"] += 1
            else:
                counts["other"] += 1
            original(popen, args, *rest, **kwargs)
        subprocess.Popen.__init__ = counting_init

        from tests.inprocess import InProcessNode
        start = InProcessNode.start

        def counting_start(node, *args, **kwargs):
            counts["in_process"] += 1
            return start(node, *args, **kwargs)
        InProcessNode.start = counting_start

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        before, counts_before = _sample(), dict(self.counts)
        yield
        after = _sample()
        entry = self.files.setdefault(item.path.name, {"tests": 0, "wall": 0.0, "cpu_self": 0.0, "cpu_reaped": 0.0,
                                                       "cpu_live": 0.0, **{k: 0 for k in self.counts}})
        entry["tests"] += 1
        entry["wall"] += after["wall"] - before["wall"]
        entry["cpu_self"] += after["self"] - before["self"]
        entry["cpu_reaped"] += after["reaped"] - before["reaped"]
        entry["cpu_live"] += after["live"] - before["live"]
        for kind, count in self.counts.items():
            entry[kind] += count - counts_before[kind]

    def pytest_sessionfinish(self, session):
        """One line per file, and one for the whole process (its start-up and session fixtures included)."""
        now = _sample()
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        lines = [{"file": name, "worker": worker, **entry} for name, entry in self.files.items()]
        lines.append({"file": None, "worker": worker, "wall": now["wall"] - self.session_start["wall"],
                      "cpu_self": now["self"], "cpu_reaped": now["reaped"], "cpu_live": now["live"]})
        with open(self.path, "a") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
