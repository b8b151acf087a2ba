"""The cache's purges: by key match, by URL, by prefix, all; and who is told of them.

Mixed into Cache (core/cache.py), whose lock, books and memory a purge works
on: the walk runs under the books lock and tells every process before the lock
is let go, so fills in flight anywhere of what it purged are not kept and every
process forgets what it held of them (docs/ARCHITECTURE.md, "Cache across
processes").
"""

import os
import threading
from collections.abc import Callable, Iterable

from contentnode.core.cache_entries import (OBJECT_NAME_DIGITS, entry_paths, file_size, object_name, read_entry,
                                            remove_if_present, temp_parts)
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

    def purge(self, match: Callable[[tuple], bool] | None, objects: list[str] | None = None) -> int:
        """Remove every entry whose key matches (None: every entry), whatever process stored it;
        `objects` (object names) narrows the walk to those objects' files.

        The walk runs under the books lock, so no fill anywhere commits during it, and every
        process is told before the lock is let go. With `objects`, they go into the books' ring
        of invalidations: each process forgets those objects' entries before its next answer
        (a small body it holds may outlive its file, evicted elsewhere). Those it touched (a file
        removed, or a fill in flight anywhere) also go into the ring of touched ones: their fills
        in flight anywhere are served to their readers but not kept, while every other fill goes
        on, however many purges touched nothing meanwhile. Without, the
        generation goes up: each process forgets everything it held and no fill in flight is
        kept. Hits from memory go on during the walk (they began before the purge ended).
        """
        removed, touched = 0, set()
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
                touched.add(name[:OBJECT_NAME_DIGITS])
            if objects is None:
                self.ledger.bump_generation()
            else:
                touched.update(self._filling(objects))
                self.ledger.record_invalidations(objects, sorted(touched))
            self.ledger.record_purge(self.clock(), removed)
        with self._lock:
            self._sync()
        return removed

    def purge_urls(self, objects: Iterable[tuple[str, str]]) -> int:
        """Each (host, path) object and all its image variants and encodings: only the
        folder of each object is listed, and only these objects are forgotten (purge)."""
        wanted = set(objects)
        count = self.purge(lambda k: (k[0], k[1]) in wanted, [object_name(*o) for o in wanted])
        return self._purged(count, [("url", host, path) for host, path in sorted(wanted)])

    def _filling(self, objects: list[str]) -> set[str]:
        """Those of `objects` a fill is in flight for in any process (books lock held): each fill
        has a temp file named after its key until it ends (core/cache_entries.py temp_name), and a
        key's name begins with its object's."""
        wanted = set(objects)
        return {rest[:OBJECT_NAME_DIGITS] for rest in (temp_parts(name)[1] for name in os.listdir(self._tmp))
                if rest[:OBJECT_NAME_DIGITS] in wanted}

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
