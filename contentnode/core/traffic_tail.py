"""The live tail: the most recent public requests, in memory only (never a query string).

A public worker keeps what it served since its last report (at most MAX
entries) and hands it up the counts pipe; the daemon gives every entry an id
in arrival order and keeps the last MAX. A reader polls with `after` (the
last id it saw) and gets only newer entries; an `after` beyond the newest id
(the daemon restarted, the ids began again) gets the whole buffer.
"""

import threading
from collections import deque

from contentnode.clock import rfc3339
from collections.abc import Callable

from contentnode.core.traffic_shape import client_view, shaped

MAX = 1000
FIELDS = ("time", "domain", "method", "path", "status", "bytes", "cache", "client", "referer", "country")


class TrafficTail:
    def __init__(self, client_mode: Callable[[], str]):
        self.client_mode = client_mode   # the client_addresses setting as it is now
        self._lock = threading.Lock()
        self._pending: deque = deque(maxlen=MAX)   # rows (FIELDS order) since the last report
        self._kept: deque = deque(maxlen=MAX)      # (id, row)
        self._next_id = 1

    def record(self, row: tuple) -> None:
        """One request as a raw row (core/traffic_top.py shaped()), in FIELDS order."""
        self._pending.append(row)   # deque.append is atomic: no lock on the request's path

    def take_pending(self) -> list:
        """The rows since the last take, shaped (popped one by one: a row appended meanwhile stays
        for the next take)."""
        pop = self._pending.popleft
        mode = self.client_mode()
        return [list(shaped(pop(), mode)) for _ in range(len(self._pending))]

    def merge_pending(self, rows) -> None:
        with self._lock:
            for row in rows[-MAX:]:
                if isinstance(row, list) and len(row) == len(FIELDS):
                    self._kept.append((self._next_id, row))
                    self._next_id += 1

    def entries(self, domain: str | None, status, after: int, client_mode: str) -> dict:
        """{"requests": [...] oldest first, "next_after": the cursor for the next poll}.

        `status` is None, a status code, or a class such as "4xx" given as its first digit string.
        """
        self.merge_pending(self.take_pending())
        with self._lock:
            kept = list(self._kept)
            newest = self._next_id - 1
        if after > newest:
            after = 0
        out = []
        for entry_id, row in kept:
            if entry_id <= after:
                continue
            entry = dict(zip(FIELDS, row))
            if domain is not None and entry["domain"] != domain:
                continue
            if status is not None and not _status_matches(entry["status"], status):
                continue
            entry["time"] = rfc3339(entry["time"])
            entry["client"] = client_view(entry["client"], client_mode)
            out.append({"id": entry_id, **entry})
        return {"requests": out, "next_after": newest}


def _status_matches(code: int, wanted) -> bool:
    return code == wanted if isinstance(wanted, int) else str(code)[0] == wanted
