"""The cache's books against its folder: recounting them after a process died, and at the
daemon's start dropping torn entry files and dead processes' temp files (and adopting the
entry files of 0.1, so an upgrade keeps the cache).

Mixed into Cache (core/cache.py), like CachePurges: the ledger's total is the size of the
folder whenever its lock is free, and these are the walks that make it so again
(docs/ARCHITECTURE.md, "Cache across processes").
"""

import os
import threading

from contentnode.core.cache_entries import (adopt_legacy, entry_paths, file_size, read_entry, remove_if_present,
                                            temp_parts)
from contentnode.core.cache_ledger import CacheLedger


class CacheBooks:
    """The settling half of Cache; the attributes below are Cache's own."""

    root: str
    ledger: CacheLedger
    _lock: threading.Lock
    _tmp: str
    _temps: set[str]

    def settle(self) -> None:
        """Make the books equal the folder again: after a process died (perhaps halfway through
        an update), its temp files go and the total is recounted."""
        with self._lock, self.ledger.books():
            self._settle(check_entries=False)

    def _settle(self, check_entries: bool) -> None:
        """(Both locks held.) With check_entries (at start), torn or foreign entry files go too."""
        total = entries = 0
        for name in os.listdir(self._tmp):
            path = os.path.join(self._tmp, name)
            if self._owner_alive(name):
                total += file_size(path)
            else:
                remove_if_present(path)
        for path, name in list(entry_paths(self.root)):
            if check_entries and read_entry(path, name) is None:
                path = adopt_legacy(self.root, path, name) or path
                if read_entry(path, os.path.basename(path)) is None:
                    remove_if_present(path)
                    continue
            size = file_size(path)
            total += size
            entries += 1
        self.ledger.recount(total, entries)

    def _owner_alive(self, tmp_name: str) -> bool:
        """Whether a temp file's process lives (for this process's own pid: whether a fill of this
        cache uses it, since a dead process's pid may be this one's now)."""
        pid = temp_parts(tmp_name)[0]
        if not pid.isdigit():
            return False
        return tmp_name in self._temps if int(pid) == self.ledger.pid else self.ledger.alive(int(pid))
