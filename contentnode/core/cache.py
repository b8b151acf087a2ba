"""Disk cache of origin objects, with single flight.

One file per entry (host + path + image variant), named by the SHA-256 of the
key: a small JSON header, then the body, so one os.replace makes an entry
appear whole and a hit is one sendfile from a known offset. The index lives in
memory and is rebuilt from the files at start (file mtime gives the LRU order,
so it survives restarts); a file whose size does not match its header is a
torn write and is dropped. Small bodies are also kept in memory after their
first hit (HOT_MAX_OBJECT each, HOT_MAX_BYTES in all, oldest first out), so a
hit on a thumbnail or a stylesheet costs no open, sendfile or close.

Concurrent misses for one key share one fill: a background thread fetches the
origin into a temp file while every waiting request (the first one included)
tails that file, so the first response streams while the cache fills and the
origin sees exactly one request.

With public worker processes every process has its own index and fills, and
the disk, the budget and purges are shared through a CacheLedger
(core/cache_ledger.py): a process that misses in its index looks on disk
before fetching, a fill holds its key's lock across processes (so 50 misses
spread over the workers still make one origin GET), and a purge removes
matching files whatever process stored them, then raises the generation that
makes the others forget what they held in memory.

The entry file format is in core/cache_entries.py, the fill and the objects a
request reads through in core/cache_fill.py; this module keeps the index.
"""

import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from contentnode.core.cache_entries import Entry, entry_paths, header_bytes, key_name, read_header
from contentnode.core.cache_fill import (STALL_TIMEOUT, Fill, FillAbandoned, FillTruncated, OriginAnswer,
                                         Result, SharedFile, StreamedResult)
from contentnode.core.cache_ledger import CacheLedger
from contentnode.fileio import ensure_private_dir, write_all

KEY_LOCK_WAIT = STALL_TIMEOUT / 2   # how long a fill waits for another process's fill of its key
TOUCH_EVERY = 60.0       # refresh an entry's mtime (its persisted LRU position) at most this often
HOT_MAX_OBJECT = 64 * 1024          # bodies up to this size are kept in memory after a hit
HOT_MAX_BYTES = 16 * 1024 * 1024    # the memory all those bodies may hold together
OPEN_FILES = 64                     # larger entries' files kept open between hits (most recent)


class Cache:
    """The node's object cache under `root` (normally <data_dir>/cache)."""

    def __init__(self, root: str, max_bytes: int, clock: Callable[[], float] = time.time,
                 processes: int = 1, worker_slot: int | None = None):
        """processes > 1: the daemon and its public workers share the cache. The daemon
        (worker_slot None) starts the books and indexes the files; a worker attaches to
        the books and finds entries on disk as it is asked for them."""
        self.root = root
        self.clock = clock
        self._tmp = os.path.join(root, "tmp")
        self._lock = threading.Lock()
        self._index: OrderedDict[tuple, Entry] = OrderedDict()
        self._fills: dict[tuple, Fill] = {}
        self._hot: deque = deque()   # entries holding their body in memory, oldest first
        self._hot_bytes = 0
        self._files: OrderedDict[tuple, tuple[Entry, SharedFile]] = OrderedDict()  # key -> open file, LRU
        self._purge_listeners: list[Callable[[list], None]] = []
        ensure_private_dir(self._tmp)
        ledger_path = os.path.join(root, "ledger")
        if worker_slot is None:
            self.ledger = CacheLedger(ledger_path, processes, max_bytes=max_bytes)
            self._load()
        else:
            self.ledger = CacheLedger(ledger_path, processes, slot=worker_slot)
        self._generation = self.ledger.generation()

    @property
    def max_bytes(self) -> int:
        return self.ledger.max_bytes

    @property
    def total(self) -> int:
        """Bytes of entry files on disk, whatever process stored them."""
        return self.ledger.total

    @property
    def filling_bytes(self) -> int:
        """In-flight fills' sizes (every process's), counted against max_bytes with total."""
        return self.ledger.filling()

    def forget_worker(self, slot: int) -> None:
        """A worker died: drop its temp files and what its fills had reserved."""
        for name in os.listdir(self._tmp):
            if name.startswith(f"{slot}-"):
                _unlink(os.path.join(self._tmp, name))
        self.ledger.reset_slot(slot)

    # -- start-up -----------------------------------------------------------

    def _load(self):
        """Rebuild the index from the entry files; drop temp files and torn or foreign files."""
        for name in os.listdir(self._tmp):
            _unlink(os.path.join(self._tmp, name))
        found = list(self._entries_on_disk())
        found.sort(key=lambda e: e.touched)
        for entry in found:
            self._index[entry.key] = entry
        with self._lock:
            self.ledger.add_total(sum(entry.file_size for entry in found))
            self._evict(keep=None)

    def _read_entry(self, path, name):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            header, offset = read_header(fd)
            st = os.fstat(fd)
            key = tuple(header["key"])
            if len(key) != 3 or key_name(key) != name or st.st_size != offset + header["size"]:
                raise ValueError("torn or misplaced entry")
            return Entry(key, path, offset, header["size"], header["meta"],
                         header["stored_at"], header["expires_at"], st.st_mtime, inode=st.st_ino)
        except (ValueError, KeyError, TypeError, OSError):
            if not self.ledger.shared:
                _unlink(path)  # torn or foreign; with workers, entries appear by rename only
            return None
        finally:
            os.close(fd)

    # -- lookups --------------------------------------------------------------

    def _path(self, key):
        name = key_name(key)
        return os.path.join(self.root, name[:2], name)

    def _fresh(self, key):
        """The entry for key if fresh, now the most recently used (lock held).

        With workers, a key this process does not know may have been stored by
        another one: it is looked up on disk and taken into the index.
        """
        if self.ledger.shared and self.ledger.generation() != self._generation:
            self._forget_memory()
        entry = self._index.get(key)
        if entry is None and self.ledger.shared:
            name = key_name(key)
            entry = self._read_entry(self._path(key), name)
            if entry is None or entry.key != key:
                return None
            self._index[key] = entry
        if entry is None:
            return None
        if entry.expires_at <= self.clock():
            self._drop(entry)
            return None
        self._index.move_to_end(key)
        return entry

    def _forget_memory(self):
        """Another process purged: forget the index and the bodies held (lock held); the
        files that remain are found again on disk."""
        self._generation = self.ledger.generation()
        self._index.clear()
        for key in list(self._files):
            self._retire_file(key)
        for entry in self._hot:
            entry.body = None
        self._hot.clear()
        self._hot_bytes = 0

    def _open_hit(self, entry):
        """A Result for a hit (its body in memory when small, else the shared open file), or None
        when the file vanished."""
        body = entry.body
        if body is not None:
            self._touch(entry, entry.path)
            return Result(200, entry.meta, entry.size, True, entry=entry, body=body)
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

    def _open_shared(self, entry):
        """A hit on a large entry, read through the entry's shared descriptor (opened if needed)."""
        with self._lock:
            if self._index.get(entry.key) is not entry:
                return None   # dropped or replaced since the lookup: look again
            held = self._files.get(entry.key)
            if held is not None and held[0] is entry:
                self._files.move_to_end(entry.key)
                shared = held[1]
            else:
                fd = self._open_current(entry)
                if fd is None:
                    self._forget(entry)
                    return None
                shared = SharedFile(fd)
                self._files[entry.key] = (entry, shared)
                while len(self._files) > OPEN_FILES:
                    self._retire_file(next(iter(self._files)))
            shared.users += 1
        self._touch(entry, shared.fd)
        return Result(200, entry.meta, entry.size, True, entry=entry, shared_fd=shared.fd,
                      on_close=lambda: self._release_file(shared))

    def _retire_file(self, key) -> None:
        """Stop sharing the open file of key, closing it now if no hit is sending it (lock held)."""
        held = self._files.pop(key, None)
        if held is not None:
            held[1].retired = True
            if held[1].users == 0:
                os.close(held[1].fd)

    def _release_file(self, shared: SharedFile) -> None:
        with self._lock:
            shared.users -= 1
            if shared.retired and shared.users == 0:
                os.close(shared.fd)

    def _open_current(self, entry) -> int | None:
        """The entry's file opened for reading, or None when it is gone or (with workers)
        another process replaced it since this process indexed it."""
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if self.ledger.shared and os.fstat(fd).st_ino != entry.inode:
            os.close(fd)
            return None
        return fd

    def _forget(self, entry):
        """Take an entry whose file is gone or replaced out of the index, not off the disk
        (lock held): the caller looks again."""
        if self._index.get(entry.key) is entry:
            del self._index[entry.key]
            self._retire_file(entry.key)

    def _touch(self, entry, file):
        """Refresh the file's mtime, its LRU position after a restart, at most every TOUCH_EVERY."""
        now = self.clock()
        if now - entry.touched >= TOUCH_EVERY:
            entry.touched = now
            try:
                os.utime(file)
            except OSError:
                pass

    def _keep_hot(self, entry: Entry, body: bytes):
        """Keep a small body in memory; the oldest kept ones go when HOT_MAX_BYTES is passed."""
        with self._lock:
            if entry.body is not None or self._index.get(entry.key) is not entry:
                return
            entry.body = body
            self._hot.append(entry)
            self._hot_bytes += len(body)
            while self._hot_bytes > HOT_MAX_BYTES:
                old = self._hot.popleft()
                self._hot_bytes -= len(old.body)
                old.body = None

    def lookup(self, key: tuple) -> Result | None:
        """A fresh entry opened for reading, or None (a miss or an expired entry)."""
        with self._lock:
            entry = self._fresh(key)
        return self._open_hit(entry) if entry is not None else None

    def get(self, key: tuple, fetch: Callable[[], OriginAnswer], ttl: int) -> Result:
        """A hit, or a share of the one fill for this key, started here if needed.

        Raises what `fetch` raised when the origin could not be reached at all.
        """
        for _ in range(3):
            with self._lock:
                entry = self._fresh(key)
                if entry is None:
                    fill = self._fills.get(key) or self._start_fill(key, fetch, ttl)
                    # opened under the lock: the fill cannot be renamed or removed yet
                    fd = os.open(fill.tmp_path, os.O_RDONLY)
                    fill.readers += 1
            if entry is None:
                result = self._join(fill, fd, fetch)
            else:
                result = self._open_hit(entry)
            if result is not None:
                return result
        raise FileNotFoundError("cache entry keeps vanishing")

    def _join(self, fill, fd, fetch):
        try:
            answer = fill.wait_ready()
        except BaseException:
            os.close(fd)
            self._leave(fill)
            raise
        if fill.adopted:
            os.close(fd)
            self._leave(fill)
            return None
        if fill.streamed or answer.status != 200:
            os.close(fd)
            self._leave(fill)
            return self._stream(fetch) if fill.streamed else Result(answer.status, answer.meta, 0, False)
        return Result(200, answer.meta, answer.length, False, fill=fill, fd=fd,
                      on_close=lambda: self._leave(fill))

    @staticmethod
    def _stream(fetch) -> Result:
        answer = fetch()
        if answer.status != 200:
            answer.close()
            return Result(answer.status, answer.meta, 0, False)
        return StreamedResult(answer)

    def _leave(self, fill: Fill) -> None:
        """One reader is done with the fill; the last one to leave before the end stops it."""
        with self._lock:
            fill.readers -= 1
            if fill.readers == 0 and not fill.done:
                fill.abandoned = True
                if self._fills.get(fill.key) is fill:
                    del self._fills[fill.key]

    def _reserve(self, fill, size: int) -> bool:
        """Count a fill's size against the cap before writing it (lock held): evict older
        entries to make room; False when it cannot fit beside the other fills in flight."""
        if fill.discard or size > self.max_bytes:
            return False
        with self.ledger.books():
            while self.total + self.filling_bytes + size > self.max_bytes and self._index:
                self._drop(self._index[next(iter(self._index))])
            if self.total + self.filling_bytes + size > self.max_bytes:
                return False
            self.ledger.add_filling(size)
        fill.reserved = size
        return True

    def _unreserve(self, fill) -> None:
        """Lock held."""
        if fill.reserved:
            with self.ledger.books():
                self.ledger.add_filling(-fill.reserved)
            fill.reserved = 0

    def _start_fill(self, key, fetch, ttl):
        tmp_path = os.path.join(self._tmp, f"{self.ledger.slot}-{key_name(key)}.{os.urandom(6).hex()}")
        os.close(os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        fill = Fill(key, tmp_path)
        fill.generation = self._generation
        self._fills[key] = fill
        thread = threading.Thread(target=self._run_fill, args=(fill, fetch, ttl),
                                  name="cache-fill", daemon=True)
        thread.start()
        return fill

    # -- filling --------------------------------------------------------------

    def _run_fill(self, fill, fetch, ttl):
        """Fetch, copy, commit, holding the key's lock across processes: a process that
        waited for it finds the other's entry on disk and hands that to its readers."""
        with self.ledger.key_lock(key_name(fill.key), KEY_LOCK_WAIT):
            if self.ledger.shared:
                with self._lock:
                    entry = self._fresh(fill.key)
                if entry is not None:
                    self._end_fill(fill, adopted=True)
                    return
            self._fetch_and_store(fill, fetch, ttl)

    def _fetch_and_store(self, fill, fetch, ttl):
        answer = None
        try:
            answer = fetch()
            if answer.status != 200:
                self._end_fill(fill, answer=answer, done=True)
                return
            now = self.clock()
            header = header_bytes({"key": list(fill.key), "size": answer.length,
                                    "meta": answer.meta, "stored_at": now,
                                    "expires_at": now + ttl})
            with self._lock:
                room = not fill.abandoned and self._reserve(fill, len(header) + answer.length)
            if not room:
                self._end_fill(fill, streamed=True)
                return
            fd = os.open(fill.tmp_path, os.O_WRONLY)
            try:
                write_all(fd, header)
                fill.progress(answer=answer, offset=len(header))
                self._copy(fill, fd, answer, sync=ttl > 0)
            finally:
                os.close(fd)
            self._commit(fill, ttl, answer, header, now)
        except BaseException as exc:  # every failure must reach the waiting readers
            self._end_fill(fill, error=exc)
        finally:
            if answer is not None:
                answer.close()

    def _end_fill(self, fill, **outcome):
        """Forget a fill that leaves no entry and wake its readers."""
        with self._lock:
            if self._fills.get(fill.key) is fill:
                del self._fills[fill.key]
            self._unreserve(fill)
            _unlink(fill.tmp_path)
        fill.progress(**outcome)

    def _copy(self, fill, fd, answer, sync=False):
        """Body bytes to the temp file, handed to the readers as they land. With `sync`, the
        file is on disk before the rename makes it an entry: after a power loss an entry is
        whole or absent, never the right size full of zeros. The last bytes reach the readers
        only with the commit (_commit), so a client that got the whole body and asks again
        finds the entry."""
        written = 0
        for chunk in answer.chunks:
            if fill.abandoned:
                raise FillAbandoned("no reader is left")
            if written + len(chunk) > answer.length:
                raise FillTruncated("origin sent more than announced")
            write_all(fd, chunk)
            written += len(chunk)
            if written == answer.length and sync:
                os.fsync(fd)
            if written < answer.length:
                fill.progress(written=written)
        if written != answer.length:
            raise FillTruncated("origin sent less than announced")
        if written == 0 and sync:
            os.fsync(fd)

    def _commit(self, fill, ttl, answer, header, now):
        """Make the filled file an entry (or drop it when uncacheable or purged meanwhile)."""
        size = len(header) + answer.length
        with self._lock:
            if self._fills.get(fill.key) is fill:
                del self._fills[fill.key]
            self._unreserve(fill)
            purged = fill.generation != self.ledger.generation()  # by another process, meanwhile
            if not (fill.discard or purged) and ttl > 0 and size <= self.max_bytes:
                path = self._path(fill.key)
                ensure_private_dir(os.path.dirname(path))
                with self.ledger.books():
                    replaced = _file_size(path)
                    os.replace(fill.tmp_path, path)
                    self.ledger.add_total(size - replaced)
                if self._index.pop(fill.key, None) is not None:
                    self._retire_file(fill.key)
                entry = Entry(fill.key, path, len(header), answer.length, answer.meta,
                              now, now + ttl, now, inode=os.stat(path).st_ino)
                self._index[fill.key] = entry
                self._evict(keep=fill.key)
            else:
                _unlink(fill.tmp_path)
        fill.progress(written=answer.length, done=True)

    # -- removal --------------------------------------------------------------

    def _drop(self, entry):
        """Remove one entry (lock held). The file goes only if it is still this entry's: another
        process may have replaced it with a newer one."""
        if self._index.pop(entry.key, None) is not None:
            self._retire_file(entry.key)
            self._remove_file(entry.path, entry.inode)

    def _remove_file(self, path, inode) -> bool:
        with self.ledger.books():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return False
            if st.st_ino != inode:
                return False
            _unlink(path)
            self.ledger.add_total(-st.st_size)
            return True

    def _evict(self, keep):
        """Drop least recently used entries until the total fits (lock held)."""
        while self.total > self.max_bytes and self._index:
            key = next(iter(self._index))
            if key == keep:
                break
            self._drop(self._index[key])

    def set_limit(self, max_bytes: int):
        with self._lock:
            with self.ledger.books():
                self.ledger.set_max_bytes(max_bytes)
            self._evict(keep=None)

    def purge(self, match: Callable[[tuple], bool]) -> int:
        """Remove every entry whose key matches; fills in progress for it are not kept.

        With workers, entries other processes stored are found on disk, and the
        raised generation makes every process forget what it holds in memory
        (and drop the fills it has in flight).
        """
        with self._lock:
            victims = [e for k, e in self._index.items() if match(k)]
            removed = {e.path for e in victims if self._remove_file(e.path, e.inode)}
            for entry in victims:
                self._index.pop(entry.key, None)
                self._retire_file(entry.key)
            if self.ledger.shared:
                for entry in self._entries_on_disk():
                    if match(entry.key) and self._remove_file(entry.path, entry.inode):
                        removed.add(entry.path)
                self._generation = self.ledger.bump_generation()
            for key, fill in self._fills.items():
                if match(key):
                    fill.discard = True
                else:
                    fill.generation = self._generation
        return len(removed)

    def _entries_on_disk(self):
        for path, name in entry_paths(self.root):
            entry = self._read_entry(path, name)
            if entry is not None:
                yield entry

    def add_purge_listener(self, listener: Callable[[list], None]) -> None:
        """listener([(kind "url"|"prefix"|"all", host, path or prefix), ...]) after each purge
        asked for by name, one call per purge request (a fleet's primary replays them)."""
        self._purge_listeners.append(listener)

    def _purged(self, count: int, entries: list) -> int:
        for listener in self._purge_listeners:
            listener(entries)
        return count

    def purge_urls(self, targets) -> int:
        """Each (host, path) object and all its image variants."""
        targets = set(targets)
        count = self.purge(lambda k: (k[0], k[1]) in targets)
        return self._purged(count, [("url", host, path) for host, path in sorted(targets)])

    def purge_url(self, host: str, path: str) -> int:
        return self.purge_urls([(host, path)])

    def purge_prefix(self, host: str, prefix: str) -> int:
        return self._purged(self.purge(lambda k: k[0] == host and k[1].startswith(prefix)),
                            [("prefix", host, prefix)])

    def purge_all(self) -> int:
        return self._purged(self.purge(lambda k: True), [("all", None, None)])

    # -- reporting ------------------------------------------------------------

    def state(self, key: tuple) -> dict:
        """What probe shows: cached or not, age, size, seconds left."""
        now = self.clock()
        with self._lock:
            entry = self._index.get(key) or (self._fresh(key) if self.ledger.shared else None)
            if entry is None or entry.expires_at <= now:
                return {"cached": False, "age": None, "size": None, "expires_in": None}
            return {"cached": True, "age": int(now - entry.stored_at), "size": entry.size,
                    "expires_in": int(entry.expires_at - now)}

    def stats(self) -> dict:
        """Entries and bytes on disk (with workers, whatever process stored them); fills in
        flight in this process."""
        with self._lock:
            entries = self._count_files() if self.ledger.shared else len(self._index)
            return {"entries": entries, "bytes": self.total,
                    "max_bytes": self.max_bytes, "filling": len(self._fills)}

    def _count_files(self) -> int:
        return sum(1 for _ in entry_paths(self.root))


def _file_size(path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
