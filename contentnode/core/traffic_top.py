"""Traffic insight: the top paths, clients, referers, statuses, cache outcomes and countries per domain.

A public request only appends its raw tuple to a queue (the request thread's
cost must stay small: see bench/bench_traffic.py); the queue is folded when it
is reported, read or reaches MAX_ROWS, a column at a time (_counted: each
dimension's values counted per domain and minute, only each distinct value
made what may be kept, as traffic_shape.shaped() does for one row), into a bounded Summary
(core/traffic_summary.py) per domain, minute and dimension. A public worker
only collects what it counted since its last report (`take_pending`); the
daemon adds the reports of every process (`merge_pending`) and its own folds
into per-minute summaries only (the last hour). An hour's summaries (the last
7 days) are built from its minutes when they are asked for or saved, and kept
until the next fold of that hour; when the first of its minutes is forgotten,
the hour is sealed: built once more and kept, a late report for it merged
into it too. So each distinct key of a fold is merged once, not twice (the
fold is traffic insight's main cost), and memory depends on the number of
domains and the time kept, never on how many distinct paths or clients
arrive. The daemon saves the summaries to <data_dir>/traffic_top.json every
`traffic_save_seconds` (an hour unless the start-up value says otherwise) and
at a clean stop, so a restart keeps the 24 h and 7 d views.
"""

import json
import os
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from itertools import repeat
from operator import call, floordiv

from contentnode.core.traffic_shape import client_view, column_views
from contentnode.core.traffic_summary import Summary
from contentnode.fileio import atomic_write

DIMENSIONS = ("path", "client", "referer", "status", "cache", "country")
RANGES = {"1h": (60, 60), "24h": (3600, 24), "7d": (3600, 168)}   # name: (summary step, summaries)
HOUR = 3600
KEEP = 32             # keys a minute's or an hour's summary keeps per dimension (it may grow to twice)
PENDING_KEEP = 128    # keys per dimension a worker collects between two reports
MAX_ROWS = 2_000     # requests appended before they are folded into the summaries; small: see metrics.MAX_ANSWERED
MAX_DOMAINS = 50      # domains with summaries of their own; later ones are not summarised
ANSWERED = 20         # keys a top answer lists
FORMAT_VERSION = 1


def _counted(rows: list, client_mode: str) -> dict:
    """{(domain, minute start): [Summary per dimension]}: the exact counts of raw rows, as kept.
    The rows are grouped by domain and minute (usually there is one group: a fold's rows are a
    report's or a read's); each group's columns are counted with no Python per row (Summary.counted)
    and only each column's distinct values shaped, a column at a time (core/traffic_shape.py)."""
    if not rows:
        return {}
    seconds, domains, *_ = columns = list(zip(*rows))
    if len(set(domains)) == 1 and min(seconds) // 60 == max(seconds) // 60:
        groups = {(domains[0], seconds[0] // 60): columns}
    else:
        grouped: defaultdict = defaultdict(list)
        minutes = map(floordiv, seconds, repeat(60))
        deque(map(list.append, map(grouped.__getitem__, zip(domains, minutes)), rows), maxlen=0)
        groups = {key: list(zip(*group)) for key, group in grouped.items()}
    views = column_views(client_mode)
    counted = {}
    for (domain, minute), (_, _, _, path, status, sizes, cache, client, referer, country) in groups.items():
        total = sum(sizes)
        counted[domain, minute * 60] = [Summary.counted(column, sizes, view, total) for column, view
                                        in zip((path, client, referer, status, cache, country), views)]
    return counted


def _summaries(keep: int) -> list:
    return [Summary(keep) for _ in DIMENSIONS]


class TrafficTop:
    """Thread-safe summaries; `path` None for a public worker (it keeps nothing, saves nothing)."""

    def __init__(self, path: str | None, clock: Callable[[], float], client_mode: Callable[[], str]):
        self.path = path
        self.clock = clock
        self.client_mode = client_mode   # the client_addresses setting as it is now
        self._lock = threading.Lock()
        self._rows: deque = deque()               # raw rows (see traffic_shape.shaped()) not yet folded
        self._pending: dict[tuple, list] = {}     # (domain, minute) -> summaries since the last report
        self._minutes: dict[tuple, list] = {}     # (domain, minute start) -> summaries (the last hour)
        self._hours: dict[tuple, list] = {}       # (domain, hour start) -> a sealed hour's summaries
        self._built: dict[tuple, list] = {}       # (domain, open hour start) -> [Summary or None per dimension]
        self._domains: set = set()
        self._dirty = False
        if path is not None:
            self._load()

    def record(self, row: tuple) -> None:
        """Count one request, a raw row (see traffic_shape.shaped()): its values are made what is kept at the fold.
        No lock: deque.append is atomic, and the fold pops only what was appended before it began."""
        rows = self._rows
        rows.append(row)
        if len(rows) >= MAX_ROWS:
            self._fold_rows()

    def _fold_rows(self) -> None:
        """Add the appended requests to the summaries: a worker's pending ones (for its next report),
        the daemon's minutes and hours (when it serves the public port itself)."""
        mode = self.client_mode()
        with self._lock:
            rows = list(map(call, repeat(self._rows.popleft, len(self._rows))))
            for (domain, minute), summaries in _counted(rows, mode).items():
                if self.path is not None:
                    self._add(domain, minute, summaries)
                    continue
                pending = self._pending.get((domain, minute))
                if pending is None:
                    pending = self._pending[domain, minute] = _summaries(PENDING_KEEP)
                for summary, other in zip(pending, summaries):
                    summary.merge(other)

    def take_pending(self) -> list:
        """[[domain, minute, [summary dump per dimension]], ...] since the last take, now forgotten here."""
        self._fold_rows()
        with self._lock:
            pending, self._pending = self._pending, {}
        return [[domain, minute, [s.dump() for s in summaries]] for (domain, minute), summaries in pending.items()]

    def merge_pending(self, rows) -> None:
        """Add a process's report into the minute and hour summaries (the daemon's side)."""
        for domain, minute, dumps in rows:
            if not isinstance(domain, str) or len(dumps) != len(DIMENSIONS):
                continue
            loaded = [Summary.load(PENDING_KEEP, dump) for dump in dumps]
            with self._lock:
                self._add(domain, int(minute), loaded)

    def _add(self, domain: str, minute: int, summaries: list) -> None:
        """Merge a domain's minute of counts into its minute's summaries, and into its hour's only when
        that hour is sealed (a late report, or an hour read from a save that kept every hour): an open
        hour's built summaries are dropped, to be built again when asked for (lock held)."""
        if domain not in self._domains:
            if len(self._domains) >= MAX_DOMAINS:
                return
            self._domains.add(domain)
        kept = self._minutes.get((domain, minute))
        fresh = kept is None
        if kept is None:
            kept = self._minutes[domain, minute] = _summaries(KEEP)
        for summary, other in zip(kept, summaries):
            summary.merge(other)
        hour = (domain, minute - minute % HOUR)
        sealed = self._hours.get(hour)
        if sealed is None:
            self._built.pop(hour, None)
        else:
            for summary, other in zip(sealed, summaries):
                summary.merge(other)
        if fresh:
            self._prune()
        self._dirty = True

    def _prune(self) -> None:
        """Forget minutes older than an hour, each one's hour sealed first (built from all its minutes),
        and hours older than 7 days (lock held)."""
        now = int(self.clock())
        step, count = RANGES["1h"]
        oldest = now - now % step - (count - 1) * step
        stale = [key for key in self._minutes if key[1] < oldest]
        for domain, minute in stale:
            hour = (domain, minute - minute % HOUR)
            if hour not in self._hours:
                self._hours[hour] = self._built_hour(hour)
                del self._built[hour]
        for key in stale:
            del self._minutes[key]
        step, count = RANGES["7d"]
        oldest = now - now % step - (count - 1) * step
        for key in [key for key in self._hours if key[1] < oldest]:
            del self._hours[key]
        live = {domain for domain, _ in self._hours} | {domain for domain, _ in self._minutes}
        self._domains &= live

    def _hour(self, hour: tuple, index: int) -> Summary | None:
        """A dimension of a (domain, hour start)'s summary: a sealed hour's as kept, an open one's built
        from its minutes (at most 60 summaries of KEEP keys each) and kept until the next fold of
        that hour; None when nothing was counted in it (lock held)."""
        sealed = self._hours.get(hour)
        if sealed is not None:
            return sealed[index]
        built = self._built.get(hour)
        if built is None or built[index] is None:
            domain, start = hour
            minutes = [kept[index] for kept in map(self._minutes.get, zip(repeat(domain), range(start, start + HOUR, 60)))
                       if kept is not None]
            if not minutes:
                return None
            if built is None:
                built = self._built[hour] = [None] * len(DIMENSIONS)
            summary = built[index] = Summary(KEEP)
            for minute in minutes:
                summary.merge(minute)
        return built[index]

    def _built_hour(self, hour: tuple) -> list:
        """Every dimension of an open hour that has minutes, built (lock held)."""
        return [self._hour(hour, index) for index in range(len(DIMENSIONS))]

    def top(self, domain: str, range_name: str, dimension: str, client_mode: str) -> dict:
        """The ANSWERED most seen values of a dimension over a range; KeyError for an unknown one."""
        step, count = RANGES[range_name]
        index = DIMENSIONS.index(dimension)
        self._fold_rows()
        now = int(self.clock())
        last = now - now % step
        merged = Summary(1 << 30)
        with self._lock:
            for start in range(last - (count - 1) * step, last + step, step):
                if step == HOUR:
                    summary = self._hour((domain, start), index)
                else:
                    minute = self._minutes.get((domain, start))
                    summary = None if minute is None else minute[index]
                if summary is not None:
                    merged.merge(summary)
        if dimension == "client":
            merged = _clients_as(merged, client_mode)
        return {"domain": domain, "range": range_name, "by": dimension, "approximate": merged.approximate,
                "top": [{"value": key, "requests": requests, "bytes": nbytes}
                        for key, requests, nbytes in merged.top(ANSWERED)]}

    # -- persistence ------------------------------------------------------------

    def _load(self) -> None:
        """Read the saved summaries; a missing file is a fresh node, a bad one starts empty."""
        assert self.path is not None
        try:
            with open(self.path, encoding="utf-8") as f:
                saved = json.load(f)
            if saved.get("version") != FORMAT_VERSION:
                return
            # an open hour is saved built (as a release that kept every hour reads it) but built again
            # from its minutes here; a save without "open" kept every hour itself
            opened = {(domain, int(start)) for domain, start in saved.get("open", [])}
            for name, table in (("minutes", self._minutes), ("hours", self._hours)):
                for domain, start, dumps in saved[name]:
                    if isinstance(domain, str) and len(dumps) == len(DIMENSIONS) and len(self._domains) <= MAX_DOMAINS \
                            and (name == "minutes" or (domain, int(start)) not in opened):
                        table[domain, int(start)] = [Summary.load(KEEP, dump) for dump in dumps]
                        self._domains.add(domain)
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self._minutes.clear()
            self._hours.clear()
            self._domains.clear()
            os.replace(self.path, self.path + ".corrupt")

    def save(self) -> bool:
        """Write the summaries atomically if anything was counted since the last save."""
        if self.path is None:
            return False
        self._fold_rows()
        with self._lock:
            if not self._dirty:
                return False
            self._prune()
            opened = sorted({(domain, minute - minute % HOUR) for domain, minute in self._minutes} - self._hours.keys())
            hours = {**self._hours, **{hour: self._built_hour(hour) for hour in opened}}
            data = {"version": FORMAT_VERSION,
                    "minutes": [[d, s, [x.dump() for x in v]] for (d, s), v in self._minutes.items()],
                    "hours": [[d, s, [x.dump() for x in v]] for (d, s), v in hours.items()],
                    "open": [list(hour) for hour in opened]}
            raw = json.dumps(data, separators=(",", ":")).encode()
            self._dirty = False
        atomic_write(self.path, raw)
        return True


def _clients_as(merged: Summary, mode: str) -> Summary:
    """The client summary as the current setting shows it (stored earlier under another setting)."""
    if mode == "full":
        return merged
    return merged.rekeyed([client_view(key, mode) for key in merged.estimates])
