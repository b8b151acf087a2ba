"""Disk cache of origin objects, with single flight, shared by every process of the node.

One file per entry (host + path + image variant), named by digests of the
object and of the key (core/cache_entries.py): a small JSON header, then the
body, so one os.replace makes an entry appear whole and a hit is one sendfile
from a known offset. Small bodies are also kept in memory after their first
hit, and large entries' files stay open between hits (core/cache_memory.py).

Concurrent misses for one key share one fill: the request that starts it asks
the origin in its own thread, then (for an answer to store) a kept thread
copies it into a temp file while every waiting request (the first one
included) tails that file, so the first response streams while the cache
fills and the origin sees exactly one request.

One policy, whether the daemon serves the public port alone or with public
worker processes: the folder is the truth and its books (core/cache_ledger.py)
are shared. Each process keeps an index of the entries it has met; a key it
does not know is looked up on disk. A fill holds its key's lock (in the
process and across processes), reserves its size in the books (evicting the
least recently used files of the whole folder, whoever stored them) before
writing, and commits by a rename under the books lock, only if no purge ran
since it started. A purge removes the matching files under that same lock and
tells every process: a purge of named URLs records their objects in the books'
ring of invalidations, so each process forgets those objects' entries and fills
only (a fill is not kept only when the purge touched its own object: see
core/cache_purge.py); a wider one raises the generation, so each forgets what it
held in memory. Either way no file stored before the purge is found after it. The entry file format is in
core/cache_entries.py, the fill and the objects a request reads through in
core/cache_fill.py (the fills themselves in core/cache_fills.py), the purges (and who is told of them) in core/cache_purge.py, the
recount after a death and the start-up check of the folder in core/cache_books.py.
"""

import os
import threading
import time
from collections.abc import Callable
from itertools import count

from contentnode.core.cache_books import CacheBooks
from contentnode.core.cache_fills import CacheFills
from contentnode.core.cache_entries import (Entry, LruOrder, header_uid, key_name, read_entry, remove_if_present)
from contentnode.core.cache_fill import (Fill, FillTruncated, Result, SharedFile)
from contentnode.core.cache_ledger import OBJECT_DIGITS, CacheLedger
from contentnode.core.cache_memory import HOT_MAX_OBJECT, HotBodies, OpenFiles
from contentnode.core.cache_purge import CachePurges
from contentnode.core.cache_refresh import CacheRefresh
from contentnode.core.cache_unsized import CacheUnsized
from contentnode.core.fill_threads import FillThreads
from contentnode.fileio import ensure_private_dir

TOUCH_EVERY = 60.0       # refresh an entry's mtime (its LRU position for every process) at most this often
INDEX_SLACK = 1024                  # index entries (and queued files) allowed beyond twice the folder's


class Cache(CacheFills, CacheRefresh, CacheBooks, CachePurges, CacheUnsized):
    """The node's object cache under `root` (normally <data_dir>/cache)."""

    def __init__(self, root: str, max_bytes: int, clock: Callable[[], float] = time.time,
                 processes: int = 1, worker_slot: int | None = None):
        """The daemon (worker_slot None) sets the cap and settles the books with the folder;
        a public worker (slot 1..processes-1) attaches to them."""
        self.root = root
        self.clock = clock
        self.processes = processes
        self._tmp = os.path.join(root, "tmp")
        self._lock = threading.Lock()
        self._index: dict[tuple, Entry] = {}
        self._objects: dict[str, set[tuple]] = {}   # an object's first OBJECT_DIGITS digits -> its indexed keys
        self._fills: dict[tuple, Fill] = {}
        self._temps: set[str] = set()   # names of this process's temp files in use (fills detached too)
        self._hot = HotBodies()
        self._files = OpenFiles()
        self._order = LruOrder(root)
        self._ticks = count(1)
        self._hits = self._misses = 0
        self._purge_listeners: list[Callable[[list], None]] = []
        self._threads = FillThreads()
        ensure_private_dir(self._tmp)
        self.ledger = CacheLedger(os.path.join(root, "ledger"), worker_slot or 0)
        self._seen = self.ledger.changes()   # (generation, removals, invalidations) this process has followed
        if worker_slot is None:
            with self._lock, self.ledger.books():
                self.ledger.set_max_bytes(max_bytes)
                self._settle(check_entries=True)
                self._make_room(0)

    @property
    def max_bytes(self) -> int:
        return self.ledger.max_bytes

    @property
    def total(self) -> int:
        """Bytes of the cache folder's files (entries and fills in flight), whatever process wrote them."""
        return self.ledger.total

    @property
    def filling_bytes(self) -> int:
        """What this process's fills in flight have reserved."""
        with self._lock:
            return sum(fill.reserved for fill in self._fills.values())

    # -- lookups --------------------------------------------------------------

    def _path(self, key):
        name = key_name(key)
        return os.path.join(self.root, name[:2], name)

    def _sync(self) -> None:
        """Follow what other processes did (lock held): forget everything after a wide purge, the
        objects a purge of URLs named after one; close kept files that were removed from disk, so
        they hold no space the books do not count."""
        seen = self.ledger.changes()
        if seen != self._seen:
            self._follow(seen)

    def _follow(self, seen: tuple) -> None:
        objects = None if seen[0] != self._seen[0] else self.ledger.invalidated(self._seen[2], seen[2])
        if objects is None:
            self._forget_memory()
        elif objects:
            self._forget_objects(objects)
        self._seen = seen
        for entry in self._files.unlinked():
            self._forget(entry)

    def _forget_memory(self) -> None:
        """A purge happened (lock held): forget the index, the bodies and files held, and the
        fills in flight (their readers still get them; they are not kept, nor joined again)."""
        self._index.clear()
        self._objects.clear()
        self._files.retire_all()
        self._hot.clear()
        for fill in self._fills.values():
            self._discard(fill)
        self._fills.clear()

    def _forget_objects(self, objects: set[str]) -> None:
        """Objects were invalidated (lock held): forget their entries and their fills in flight."""
        for name in objects:
            for key in list(self._objects.get(name, ())):
                self._forget(self._index[key])
        for fill in [fill for fill in self._fills.values() if fill.object in objects]:
            self._discard(fill)
            del self._fills[fill.key]

    @staticmethod
    def _discard(fill: Fill) -> None:
        fill.discard = True
        fill.key_hold.release()   # it will not be kept: a new fill of the key need not wait

    def _fresh(self, key):
        """The entry for key if fresh, now the most recently used (lock held)."""
        seen = self.ledger.changes()
        if seen != self._seen:
            self._follow(seen)
        entry = self._index.get(key)
        if entry is None:
            entry = self._from_disk(key)
            if entry is None:
                return None
        now = self.clock()
        if entry.expires_at <= now:
            self._drop(entry)
            return None
        entry.used, entry.tick = now, next(self._ticks)
        return entry

    def _from_disk(self, key):
        """An entry another process (or this one, before forgetting) stored (lock held). Read
        under the books lock, so a purge in progress elsewhere finishes first."""
        path = self._path(key)
        if not os.path.exists(path):
            return None
        with self.ledger.books():
            self._sync()
            entry = read_entry(path, os.path.basename(path))
        if entry is None or entry.key != key:
            return None
        self._indexed(entry, (int(entry.touched * 1e9), 0))
        return entry

    def _current_on_disk(self, entry: Entry) -> Entry | None:
        """The key's entry as its file holds it now, when another process refreshed its head or
        replaced it since this one indexed `entry` (lock held); None when neither happened or
        the entry is gone or expired. Asked before an origin request only, never on a hit."""
        found = read_entry(entry.path, os.path.basename(entry.path))
        if found is None or found.key != entry.key or found.version == entry.version:
            return None
        self._forget(entry)
        found = self._from_disk(entry.key)   # read again under the books lock, as any lookup
        now = self.clock()
        if found is None or found.expires_at <= now:
            return None
        found.used, found.tick = now, next(self._ticks)
        return found

    def reread(self, entry: Entry) -> Entry | None:
        """The key's entry on disk when another process refreshed or replaced `entry` (a stale
        answer about to be served looks first), else None."""
        with self._lock:
            return self._current_on_disk(entry)

    def _indexed(self, entry: Entry, used: tuple) -> None:
        """Index an entry and queue its file for eviction (lock held). Other processes evict and
        replace files behind this one's back: when the index or the queue outgrows the folder,
        what is gone from disk leaves the index and the queue is walked again when next needed."""
        self._index[entry.key] = entry
        self._objects.setdefault(_object_of(entry), set()).add(entry.key)
        bound = 2 * self.ledger.entries + INDEX_SLACK
        if len(self._index) > bound:
            for stale in [e for e in self._index.values() if not os.path.exists(e.path)]:
                self._forget(stale)
        self._order.push(used, entry.path, entry, bound)

    def _open_hit(self, entry):
        """A Result for a hit (its body in memory when small, else the shared open file), or None
        when the file vanished."""
        body = entry.body
        if body is not None:
            return self._memory_hit(entry, body)
        if entry.size > HOT_MAX_OBJECT:
            return self._open_shared(entry)
        fd = self._open_current(entry)
        if fd is None:
            with self._lock:
                self._forget(entry)
            return None
        self._touch(entry, fd)
        try:
            body = os.pread(fd, entry.size, entry.offset)
        finally:
            os.close(fd)
        if len(body) != entry.size:
            raise FillTruncated("cache file shorter than its header says")
        self._keep_hot(entry, body)
        return Result(200, entry.meta, entry.size, True, entry=entry, body=body)

    def _memory_hit(self, entry, body: bytes) -> Result:
        self._touch(entry, entry.path)
        return self.held_result(entry, body)

    def _open_shared(self, entry):
        """A hit on a large entry, read through the entry's shared descriptor (opened if needed)."""
        with self._lock:
            if self._index.get(entry.key) is not entry:
                return None   # dropped or replaced since the lookup: look again
            shared = self._files.share(entry, self._open_current)
            if shared is None:
                self._forget(entry)
                return None
        self._touch(entry, shared.fd)
        return Result(200, entry.meta, entry.size, True, entry=entry, shared_fd=shared.fd,
                      on_close=lambda: self._release_file(shared))

    def _release_file(self, shared: SharedFile) -> None:
        with self._lock:
            self._files.release(shared)

    @staticmethod
    def _open_current(entry) -> int | None:
        """The entry's file opened for reading, or None when it is gone or holds another entry
        now (its header's id differs)."""
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if header_uid(fd) != entry.uid:
            os.close(fd)
            return None
        return fd

    def _forget(self, entry):
        """Take an entry whose file is gone or replaced out of the index, not off the disk
        (lock held): the caller looks again."""
        if self._index.get(entry.key) is entry:
            del self._index[entry.key]
            name = _object_of(entry)
            keys = self._objects[name]
            keys.discard(entry.key)
            if not keys:
                del self._objects[name]
        self._files.retire(entry.key, entry)

    def _touch(self, entry, file):
        """Refresh the file's mtime, its LRU position for every process, at most every TOUCH_EVERY."""
        now = entry.used
        if now - entry.touched >= TOUCH_EVERY:
            entry.touched = now
            try:
                os.utime(file, ns=(int(now * 1e9),) * 2)
            except OSError:
                pass

    def _keep_hot(self, entry: Entry, body: bytes):
        """Keep a small body in memory; the oldest kept ones go when HOT_MAX_BYTES is passed."""
        with self._lock:
            if entry.body is None and self._index.get(entry.key) is entry:
                self._hot.keep(entry, body)

    def lookup(self, key: tuple) -> Result | None:
        """A fresh entry opened for reading, or None (a miss or an expired entry)."""
        with self._lock:
            entry = self._fresh(key)
        return self._open_hit(entry) if entry is not None else None

    def peek(self, key: tuple) -> Entry | None:
        """The entry kept for key (not yet expired), without opening it: its meta and times."""
        with self._lock:
            return self._fresh(key)

    def in_memory(self, key: tuple, now: float | None = None) -> tuple[Entry, bytes] | None:
        """The fresh entry for key (fresh at `now`, the clock's time by default) and its body when
        the body is held in memory, else None. Only looked at (neither counted nor moved in the LRU
        order): the public listeners' loop thread asks first, answers only from memory, and calls
        memory_hit() once it answers."""
        held = self.held_hits(key, self.clock() if now is None else now, None, None, False)
        return None if held is None else held[0]

    def held_hits(self, key: tuple, now: float, variant_key: tuple | None, wants_variant,
                  count: bool) -> list | None:
        """[(entry, body)] for key's entry fresh at `now` and held in memory, plus (entry, body) of
        `variant_key`'s when that is given and wants_variant(meta, size) of the first says it answers;
        None when either is not held. With `count`, what is found is counted as memory_hit() counts
        it, in the same locked step (for a caller that answers whatever is found)."""
        with self._lock:
            seen = self.ledger.changes()
            if seen != self._seen:
                self._follow(seen)
            entry = self._index.get(key)
            if entry is None or entry.body is None or entry.expires_at <= now:
                return None
            held = [(entry, entry.body)]
            if variant_key is not None and wants_variant(entry.meta, entry.size):
                entry = self._index.get(variant_key)
                if entry is None or entry.body is None or entry.expires_at <= now:
                    return None
                held.append((entry, entry.body))
            if count:
                self._count_held_locked(held, now)
        if count:
            for entry, _ in held:
                self._touch(entry, entry.path)
        return held

    def recount(self, held: list, now: float, admit=None, client_ip: str = "") -> bool:
        """Count again, as held_hits() with `count` counted them, the hits it found: True when each
        entry is still the one its key holds, with the same body in memory and fresh at `now`, and
        `admit(client_ip)` (the per-client edge checks) lets the request in; False (nothing counted) once any
        was purged, evicted, replaced or expired, here or by another process, or admit() refused.
        public/prepared.py answers a repeated request again with this; `admit` runs last, so a
        token a rate limit spends is spent only for an answer given."""
        with self._lock:
            seen = self.ledger.changes()
            if seen != self._seen:
                self._follow(seen)
            index = self._index
            for entry, body in held:
                if entry.body is not body or entry.expires_at <= now or index.get(entry.key) is not entry:
                    return False
            if admit is not None and not admit(client_ip):
                return False
            self._count_held_locked(held, now)
        for entry, _ in held:
            self._touch(entry, entry.path)
        return True

    def _count_held_locked(self, held: list, now: float) -> None:
        for entry, _ in held:
            entry.used, entry.tick = now, next(self._ticks)
        self._hits += len(held)
        self.ledger.count(self._hits, self._misses)

    def memory_hit(self, entry: Entry, body: bytes, now: float | None = None) -> Result:
        """The hit on an entry in_memory() found, counted and used as get() counts and uses one."""
        self.count_memory_hit(entry, now)
        return self.held_result(entry, body)

    def count_memory_hit(self, entry: Entry, now: float | None = None) -> None:
        """Count a hit on an entry in_memory() found (its LRU position and mtime refreshed, used at
        `now`, the clock's time by default) whose Result (held_result) was made before it was known
        to be answered."""
        with self._lock:
            entry.used, entry.tick = self.clock() if now is None else now, next(self._ticks)
            self._hits += 1
            self.ledger.count(self._hits, self._misses)
        self._touch(entry, entry.path)

    @staticmethod
    def held_result(entry: Entry, body: bytes) -> Result:
        """A hit's Result over a body held in memory, neither counted nor touched."""
        return Result(200, entry.meta, entry.size, True, entry=entry, body=body)

    # -- removal --------------------------------------------------------------

    def _drop(self, entry):
        """Remove one expired entry (lock held), its file only if it still holds this entry:
        another process may have stored a newer one."""
        self._forget(entry)
        with self.ledger.books():
            fd = self._open_current(entry)
            if fd is None:
                return
            try:
                remove_if_present(entry.path)
                self.ledger.add(total=-os.fstat(fd).st_size, entries=-1, removals=1)
            finally:
                os.close(fd)

    def set_limit(self, max_bytes: int):
        with self._lock, self.ledger.books():
            self.ledger.set_max_bytes(max_bytes)
            self._make_room(0)

    def close(self) -> None:
        """At stop: close the files kept open and the books (this process's locks go with them)."""
        self._threads.close()
        with self._lock:
            self._files.retire_all()
            self.ledger.close()

    # -- reporting ------------------------------------------------------------

    def state(self, key: tuple) -> dict:
        """What probe shows: cached or not, age, size, seconds left."""
        now = self.clock()
        with self._lock:
            entry = self._fresh(key)
            if entry is None:
                return {"cached": False, "age": None, "size": None, "expires_in": None}
            return {"cached": True, "age": int(now - entry.stored_at), "size": entry.size,
                    "expires_in": int(entry.expires_at - now)}

    def stats(self) -> dict:
        """Entries and bytes on disk, whatever process stored them; fills in flight in this process."""
        with self._lock:
            return {"entries": self.ledger.entries, "bytes": self.total,
                    "max_bytes": self.max_bytes, "filling": len(self._fills)}

    def books(self) -> dict:
        """The ledger's view for the panel: stats, each process's hits and misses, the last purge."""
        processes = []
        for slot in self.ledger.slots(self.processes):
            asked = slot["hits"] + slot["misses"]
            processes.append(dict(slot, hit_ratio=round(slot["hits"] / asked, 4) if asked else None))
        return dict(self.stats(), processes=processes, last_purge=self.ledger.last_purge())


def _object_of(entry: Entry) -> str:
    """The entry's object as the books' rings name it: its file name begins with the object's."""
    return os.path.basename(entry.path)[:OBJECT_DIGITS]
