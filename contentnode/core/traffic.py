"""Traffic accounting of the public port: counters per domain and time series.

Every public request adds to its domain's counters and to time buckets at
three resolutions (1 h at 1 min, 24 h at 5 min, 7 d at 1 h). The series are
append-heavy, so they live in their own file (<data_dir>/traffic.json), not
in the state document, written atomically every so often and at shutdown so a
restart keeps the history. The number of domains tracked is bounded: past
`max_domains`, traffic is counted under "other", which keeps both the file
and the Prometheus label set small whatever Host headers arrive.
"""

import collections
import json
import operator
import os
import threading
import time
from collections.abc import Callable
from itertools import repeat

from contentnode.clock import rfc3339
from contentnode.fileio import atomic_write

COUNTERS = ("requests", "bytes_out", "cache_hits", "cache_misses", "errors_4xx", "errors_5xx")
RANGES = {"1h": (60, 60), "24h": (300, 288), "7d": (3600, 168)}   # name: (step seconds, points)
TOTAL = ""          # the series label for all domains together
OTHER = "other"     # the label for domains past the bound
FORMAT_VERSION = 1
MAX_PENDING = 1000  # (label, minute) rows kept before folding into the series
MAX_RECORDED = 128  # requests appended before they are counted into the rows (when nothing reads them); small: see metrics.MAX_ANSWERED


def _empty():
    return [0] * len(COUNTERS)


class Traffic:
    """Thread-safe counters and series; `save()` persists them to `path`."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time, max_domains: int = 50):
        self.path = path
        self.clock = clock
        self.max_domains = max_domains
        self._lock = threading.Lock()
        self._totals: dict[str, list] = {}                    # label -> counters since start
        self._series: dict[str, dict[int, dict[int, list]]] = {}  # label -> step -> start -> counters
        self._pending: dict[tuple, list] = {}                  # (label, minute) -> counters
        self._recorded: collections.deque = collections.deque()  # requests not yet in _pending
        self._labels: set = set()                               # domains with their own label
        self._dirty = False
        self._load()

    def label(self, domain: str | None) -> str:
        """The label a domain is counted under (lock held)."""
        if not domain or domain in (TOTAL, OTHER):
            return OTHER
        if domain in self._labels:
            return domain
        if len(self._labels) >= self.max_domains:
            return OTHER
        self._labels.add(domain)
        return domain

    def record(self, domain: str | None, status: int, bytes_out: int, cache: str | None = None,
               now: float | None = None):
        """Count one public request; cache is "hit", "miss" or None (not a cacheable answer); `now`,
        the request's time when its caller took it already.

        This runs on every public request, so it only appends the request (deque.append is atomic:
        no lock); `_count_recorded` adds the appended ones to the per-minute rows before anything
        reads or takes them, or past MAX_RECORDED.
        """
        recorded = self._recorded
        recorded.append((domain, status, bytes_out, cache, int(self.clock() if now is None else now) // 60 * 60))
        if len(recorded) >= MAX_RECORDED:
            with self._lock:
                self._count_recorded()
                if len(self._pending) > MAX_PENDING:
                    self._fold()

    def _count_recorded(self):
        """Add the requests appended so far to the per-minute rows (lock held), each distinct
        request once with its number (the same rows, and labels given in the same order, as
        counting them one by one; one appended meanwhile stays for the next count)."""
        recorded = self._recorded
        if not recorded:
            return
        taken = collections.Counter(map(operator.call, repeat(recorded.popleft, len(recorded))))
        pending, labels = self._pending, self._labels
        for (domain, status, bytes_out, cache, minute), times in taken.items():
            key = (domain if domain in labels else self.label(domain), minute)
            row = pending.get(key)
            if row is None:
                row = pending[key] = _empty()
            row[0] += times
            row[1] += bytes_out * times
            if cache == "hit":
                row[2] += times
            elif cache == "miss":
                row[3] += times
            if status >= 500:
                row[5] += times
            elif status >= 400:
                row[4] += times
        self._dirty = True

    def take_pending(self) -> list:
        """[[label, minute, counters], ...] recorded since the last take, now forgotten here:
        a public worker hands its rows to the daemon, which adds them with merge_pending."""
        with self._lock:
            self._count_recorded()
            rows, self._pending = self._pending, {}
        return [[label, minute, row] for (label, minute), row in rows.items()]

    def merge_pending(self, rows) -> None:
        with self._lock:
            self._count_recorded()
            for label, minute, counters in rows:
                if len(counters) != len(COUNTERS):
                    continue
                key = (self.label(label if label != OTHER else None), int(minute))
                row = self._pending.setdefault(key, _empty())
                for i, value in enumerate(counters):
                    row[i] += int(value)
                self._dirty = True
            if len(self._pending) > MAX_PENDING:
                self._fold()

    def _fold(self):
        """Add the recorded requests and the pending per-minute rows to the totals and every
        resolution (lock held)."""
        self._count_recorded()
        now = int(self.clock())
        for (label, minute), row in self._pending.items():
            for name in (TOTAL, label):
                totals = self._totals.setdefault(name, _empty())
                per_step = self._series.setdefault(name, {})
                for i, value in enumerate(row):
                    totals[i] += value
                for step, count in RANGES.values():
                    buckets = per_step.setdefault(step, {})
                    counters = buckets.setdefault(minute - minute % step, _empty())
                    for i, value in enumerate(row):
                        counters[i] += value
                    if len(buckets) > count + 1:
                        self._prune(buckets, step, count, now)
        self._pending.clear()

    @staticmethod
    def _prune(buckets, step, count, now):
        oldest = now - now % step - (count - 1) * step
        for start in [s for s in buckets if s < oldest]:
            del buckets[start]

    def points(self, range_name: str, domain: str | None = None) -> dict:
        """The API answer for a range: one zero-filled point per step, oldest first.

        KeyError for an unknown range name.
        """
        step, count = RANGES[range_name]
        now = int(self.clock())
        last = now - now % step
        with self._lock:
            self._fold()
            buckets = self._series.get(TOTAL if domain is None else domain, {}).get(step, {})
            rows = [(start, list(buckets.get(start, _empty())))
                    for start in range(last - (count - 1) * step, last + step, step)]
        points = [dict(t=rfc3339(start), **dict(zip(COUNTERS, values))) for start, values in rows]
        return {"range": range_name, "step_seconds": step, "points": points}

    def totals(self) -> dict:
        """Counters per label since this process started (Prometheus counters), TOTAL excluded."""
        with self._lock:
            self._fold()
            return {label: dict(zip(COUNTERS, values))
                    for label, values in self._totals.items() if label != TOTAL}

    def domains(self) -> list:
        with self._lock:
            self._fold()
            return sorted(label for label in self._series if label != TOTAL)

    # -- persistence ------------------------------------------------------------

    def _load(self):
        """Read the saved series; a missing file is a fresh node, a corrupt one starts empty."""
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError):
            os.replace(self.path, self.path + ".corrupt")
            return
        if not isinstance(saved, dict) or saved.get("version") != FORMAT_VERSION:
            return
        steps = {step for step, _ in RANGES.values()}
        for label, per_step in (saved.get("series") or {}).items():
            for step_text, buckets in per_step.items():
                if int(step_text) not in steps:
                    continue
                if label not in (TOTAL, OTHER):
                    self._labels.add(label)
                self._series.setdefault(label, {})[int(step_text)] = {
                    int(start): [int(x) for x in values][: len(COUNTERS)]
                    for start, values in buckets.items() if len(values) == len(COUNTERS)}

    def save(self, force: bool = False) -> bool:
        """Write the series atomically if anything changed; True when written."""
        with self._lock:
            self._count_recorded()
            if not (self._dirty or force):
                return False
            self._fold()
            now = int(self.clock())
            for per_step in self._series.values():
                for step, count in RANGES.values():
                    if step in per_step:
                        self._prune(per_step[step], step, count, now)
            data = {"version": FORMAT_VERSION,
                    "series": {label: {str(step): {str(s): v for s, v in buckets.items()}
                                       for step, buckets in per_step.items()}
                               for label, per_step in self._series.items()}}
            raw = json.dumps(data, separators=(",", ":")).encode()
            self._dirty = False
        atomic_write(self.path, raw)
        return True

