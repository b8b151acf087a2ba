"""The cache's purges: by key match, by URL, by prefix, all; and who is told of them.

Mixed into Cache (core/cache.py), whose lock, books and memory a purge works
on: the walk runs under the books lock and raises the generation, so fills in
flight anywhere are not kept and every process forgets what it held
(docs/ARCHITECTURE.md, "Cache across processes").
"""

import os
import threading
from collections.abc import Callable, Iterable

from contentnode.core.cache_entries import (entry_paths, file_size, object_name, read_entry, remove_if_present,
                                            temp_parts)
from contentnode.core.cache_ledger import CacheLedger


class CachePurges:
    """The purge half of Cache; the attributes below are Cache's own."""

    root: str
    _tmp: str
    clock: Callable[[], float]
    ledger: CacheLedger
    _lock: threading.Lock
    _purge_listeners: list[Callable[[list], None]]
    _sync: Callable[[], None]

    def purge(self, match: Callable[[tuple], bool] | None, objects: list[str] | None = None,
              touched_only: bool = False) -> int:
        """Remove every entry whose key matches (None: every entry), whatever process stored it;
        `objects` (object names) narrows the walk to those objects' files.

        The walk runs under the books lock, so no fill anywhere commits during it, and the
        generation goes up before the lock is let go: a fill in flight anywhere is served to its
        readers but not kept, and every process forgets what it held in memory before its next
        answer. Hits from memory go on during the walk (they began before the purge ended).
        With `touched_only` (an invalidation of `objects`), the generation goes up only when an
        entry was removed or a fill of one of them is in flight: the fills of other URLs go on.
        """
        removed = 0
        with self.ledger.books():
            for path, name in entry_paths(self.root, objects):
                if match is not None:
                    entry = read_entry(path, name)
                    if entry is None or not match(entry.key):
                        continue
                size = file_size(path)
                remove_if_present(path)
                self.ledger.add(total=-size, entries=-1, removals=1)
                removed += 1
            if not touched_only or removed or self._filling(objects or []):
                self.ledger.bump_generation()
            self.ledger.record_purge(self.clock(), removed)
        with self._lock:
            self._sync()
        return removed

    def purge_urls(self, objects: Iterable[tuple[str, str]], touched_only: bool = False) -> int:
        """Each (host, path) object and all its image variants and encodings: only the
        folder of each object is listed. `touched_only`: an unsafe method's invalidation
        (RFC 9111 §4.4), which leaves the generation alone when it finds nothing of them (purge)."""
        wanted = set(objects)
        count = self.purge(lambda k: (k[0], k[1]) in wanted, [object_name(*o) for o in wanted], touched_only)
        return self._purged(count, [("url", host, path) for host, path in sorted(wanted)])

    def _filling(self, objects: list[str]) -> bool:
        """Whether a fill of one of these objects is in flight in any process (books lock held):
        each fill has a temp file named after its key until it ends (core/cache_entries.py
        temp_name), and a key's name begins with its object's."""
        names = tuple(objects)
        return bool(names) and any(temp_parts(name)[1].startswith(names) for name in os.listdir(self._tmp))

    def add_purge_listener(self, listener: Callable[[list], None]) -> None:
        """listener([(kind "url"|"prefix"|"all", host, path or prefix), ...]) after each purge
        asked for by name, one call per purge request (a fleet's primary replays them)."""
        self._purge_listeners.append(listener)

    def _purged(self, count: int, entries: list) -> int:
        for listener in self._purge_listeners:
            listener(entries)
        return count

    def purge_url(self, host: str, path: str) -> int:
        return self.purge_urls([(host, path)])

    def purge_prefix(self, host: str, prefix: str) -> int:
        return self._purged(self.purge(lambda k: k[0] == host and k[1].startswith(prefix)),
                            [("prefix", host, prefix)])

    def purge_all(self) -> int:
        return self._purged(self.purge(None), [("all", None, None)])
