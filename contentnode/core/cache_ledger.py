"""The cache's books, one small file shared by every process that serves the public port.

Each process keeps its own index of entries in memory, but the disk, its
budget and purges belong to the node. The numbers that must agree across
processes live in `<cache>/ledger`, mapped into memory by every process (the
daemon and each public worker; with no workers, the daemon alone):

- generation: raised by every purge wider than named URLs (a prefix, all); a
  process that sees it change forgets what it held in memory (index, small
  bodies, open files, fills in flight);
- invalidations, and a ring of the last INVALIDATION_RING objects invalidated:
  a purge of named URLs (an unsafe method's invalidation, `POST /api/purge` by
  URL) records each URL's object there instead; a process that sees the count
  move forgets only those objects' entries and fills, or everything when more
  than the ring holds went by;
- touched, and a ring of the last INVALIDATION_RING objects such a purge
  touched (a file removed, a fill in flight in any process): a fill commits
  only if its object is not among those recorded since it started, so a
  flood of purges of URLs nothing holds never pushes a fill past the ring;
- removals: raised whenever an entry file is unlinked or replaced; a process
  that sees it change closes the descriptors it kept of files gone from disk,
  so no process pins space the books no longer count;
- max_bytes; total, the bytes of every file in the cache folder (entries and
  the temp files of fills in flight, which are sized to their reservation
  before a byte is written); entries, the number of entry files;
- the last purge (time, entries removed) and per process slot its pid and
  hits and misses, for the panel.

Every change to the cache folder and its count runs under a POSIX record lock
on byte 0 (`books()`), so `total` is the size of the folder whenever the lock
is free; only a process killed between the two steps leaves it off, and
`Cache.settle` recounts it. The file is never truncated once laid out: a
daemon restarted while its old workers still drain shares the same books.

The same file gives single flight across processes (a fill holds the byte its
key hashes to, behind an in-process lock per key, since record locks belong to
the process, not the thread) and liveness: every process holds the byte of
its pid for its whole life, so a temp file named by a pid whose byte is free
belongs to a dead process.

Where the OS refuses record locks (a sandbox's syscall filter), every lock
call goes on unlocked, logged once (contentnode/oscalls.py): the processes
still share the numbers but not exclusion.
"""

import contextlib
import fcntl
import functools
import mmap
import os
import struct
import threading
import time

from contentnode import oscalls

_WORD = struct.Struct("=q")
_PAIR = struct.Struct("=qq")          # two adjacent words in one call (a process counts its hits so)
_CHANGES = struct.Struct("=qqq")      # generation, removals, invalidations: the hit path reads them in one call
LAYOUT = 0x434E_4C45_4447_0005        # "CNLEDG" + version: a file laid out otherwise is laid out again
(LAYOUT_W, GENERATION, REMOVALS, INVALIDATIONS, TOUCHED, MAX_BYTES, TOTAL, ENTRIES, PURGED_AT_MS,
 PURGED_COUNT) = range(10)
FIRST_SLOT, SLOT_WORDS = 10, 3        # per slot: pid, hits, misses
MAX_SLOTS = 33                        # the daemon (0) and up to 32 public workers
RING_FIRST = FIRST_SLOT + SLOT_WORDS * MAX_SLOTS
INVALIDATION_RING = 256               # objects invalidated, the last this many kept (a word each)
TOUCHED_FIRST = RING_FIRST + INVALIDATION_RING   # the same for those a purge touched (a file, a fill)
PAGE_WORDS = TOUCHED_FIRST + INVALIDATION_RING
OBJECT_DIGITS = 15                    # hex digits of an object's name a ring word holds (60 bits)
KEY_LOCK_SPACE = 1 << 40              # key lock bytes live at 1 .. 2**40
LIVE_BASE = 1 << 41                   # a process holds LIVE_BASE + its pid while it lives
KEY_LOCK_POLL = 0.01


class KeyHold:
    """The hold of one key's lock; release() may run on any thread, and more than once."""

    def __init__(self, release):
        self.held = release is not None
        self._release = release
        self._mutex = threading.Lock()

    def release(self) -> None:
        with self._mutex:
            release, self._release = self._release, None
        if release is not None:
            release()


class CacheLedger:
    """The shared counters and locks of the cache folder holding `path`; `slot` is this
    process's (0: the daemon, 1..N: public workers)."""

    def __init__(self, path: str, slot: int = 0):
        if not 0 <= slot < MAX_SLOTS:
            raise ValueError(f"cache ledger slot {slot} out of range")
        self.slot = slot
        self.pid = os.getpid()
        self._thread_lock = threading.RLock()
        self._held = 0            # nesting depth of books() in this process
        self._keys: dict[int, list] = {}   # key lock byte -> [threading.Lock, users]
        self._keys_mutex = threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        size = _WORD.size * PAGE_WORDS
        with self._books_lock():
            if os.fstat(self._fd).st_size != size or _WORD.unpack(os.pread(self._fd, _WORD.size, 0))[0] != LAYOUT:
                os.ftruncate(self._fd, 0)
                os.ftruncate(self._fd, size)
                os.pwrite(self._fd, _WORD.pack(LAYOUT), 0)
            self._page = mmap.mmap(self._fd, size)
        self._lockf(fcntl.LOCK_SH, LIVE_BASE + self.pid)
        # the hit path's two calls, bound to C functions (no Python frame per request):
        # changes() -> (generation, removals, invalidations); count(hits, misses) sets this process's slot
        self.changes = functools.partial(_CHANGES.unpack_from, self._page, _WORD.size * GENERATION)
        self.count = functools.partial(_PAIR.pack_into, self._page, _WORD.size * (FIRST_SLOT + SLOT_WORDS * slot + 1))
        self._set_slot(0, self.pid)
        self.count(0, 0)

    def close(self) -> None:
        """Unmap and close the file (which releases every record lock this process holds on it)."""
        if self._fd >= 0:
            self._page.close()
            os.close(self._fd)
            self._fd = -1

    def _get(self, index: int) -> int:
        return _WORD.unpack_from(self._page, _WORD.size * index)[0]

    def _set(self, index: int, value: int) -> None:
        _WORD.pack_into(self._page, _WORD.size * index, value)

    def _set_slot(self, word: int, value: int) -> None:
        self._set(FIRST_SLOT + SLOT_WORDS * self.slot + word, value)

    # -- reads (no lock: aligned 8-byte words) ------------------------------------

    def generation(self) -> int:
        return self._get(GENERATION)

    @property
    def max_bytes(self) -> int:
        return self._get(MAX_BYTES)

    @property
    def total(self) -> int:
        return self._get(TOTAL)

    @property
    def entries(self) -> int:
        return self._get(ENTRIES)

    def last_purge(self) -> dict | None:
        at = self._get(PURGED_AT_MS)
        return {"at": at / 1000, "purged": self._get(PURGED_COUNT)} if at else None

    def slots(self, count: int) -> list[dict]:
        """Slots 0..count-1 that a process has used: pid, hits, misses, and whether it lives."""
        found = []
        for slot in range(min(count, MAX_SLOTS)):
            base = FIRST_SLOT + SLOT_WORDS * slot
            pid = self._get(base)
            if pid:
                found.append({"slot": slot, "pid": pid, "hits": self._get(base + 1),
                              "misses": self._get(base + 2), "alive": self.alive(pid)})
        return found

    # -- updates (callers hold books(), except their own slot's counts) ------------

    def set_max_bytes(self, value: int) -> None:
        self._set(MAX_BYTES, value)

    def add(self, total: int = 0, entries: int = 0, removals: int = 0) -> None:
        self._set(TOTAL, self._get(TOTAL) + total)
        self._set(ENTRIES, self._get(ENTRIES) + entries)
        self._set(REMOVALS, self._get(REMOVALS) + removals)

    def recount(self, total: int, entries: int) -> None:
        self._set(TOTAL, total)
        self._set(ENTRIES, entries)
        self._set(REMOVALS, self._get(REMOVALS) + 1)

    def bump_generation(self) -> int:
        generation = self.generation() + 1
        self._set(GENERATION, generation)
        return generation

    def record_invalidations(self, objects: list[str], touched: list[str]) -> None:
        """Put each object (the first OBJECT_DIGITS hex digits of its name) in the ring of
        invalidations, and those the purge touched in the ring of touched ones too."""
        self._record(INVALIDATIONS, RING_FIRST, objects)
        self._record(TOUCHED, TOUCHED_FIRST, touched)

    def _record(self, count_word: int, first: int, objects: list[str]) -> None:
        """The words first, then the count: a reader that sees the count finds them there."""
        count = self._get(count_word)
        for name in objects:
            self._set(first + count % INVALIDATION_RING, int(name[:OBJECT_DIGITS], 16))
            count += 1
        self._set(count_word, count)

    def invalidated(self, since: int, until: int) -> set[str] | None:
        """The objects (as OBJECT_DIGITS hex digits) invalidated from count `since` to `until`;
        None when the ring no longer holds them all (more went by than it keeps)."""
        return self._ring(INVALIDATIONS, RING_FIRST, since, until)

    def _ring(self, count_word: int, first: int, since: int, until: int) -> set[str] | None:
        """No lock: a word overwritten while it was read shows as a count too far ahead, checked last."""
        if until - since > INVALIDATION_RING:
            return None
        found = {f"{self._get(first + n % INVALIDATION_RING):0{OBJECT_DIGITS}x}" for n in range(since, until)}
        return found if self._get(count_word) - since <= INVALIDATION_RING else None

    def touched(self) -> int:
        """How many objects purges by URL have touched so far: a fill starting notes it."""
        return self._get(TOUCHED)

    def kept_since(self, generation: int, touched: int, name: str) -> bool:
        """Whether a fill of object `name` begun at (generation, touched) may still be kept (books
        lock held): no wider purge since, and its object not touched by a URL purge since (a purge
        that found no fill of it in flight did not touch it: not this fill's, nor in its way)."""
        if self._get(GENERATION) != generation:
            return False
        count = self._get(TOUCHED)
        if count == touched:
            return True
        objects = self._ring(TOUCHED, TOUCHED_FIRST, touched, count)
        return objects is not None and name not in objects

    def record_purge(self, at: float, purged: int) -> None:
        self._set(PURGED_AT_MS, int(at * 1000))
        self._set(PURGED_COUNT, purged)

    # -- locks ---------------------------------------------------------------------

    @contextlib.contextmanager
    def books(self):
        """Exclusive across threads and processes; re-entrant within this process (a POSIX
        record lock is per process: an inner unlock would release the outer hold)."""
        with self._books_lock():
            yield

    @contextlib.contextmanager
    def _books_lock(self):
        with self._thread_lock:
            if self._held == 0:
                self._lockf(fcntl.LOCK_EX, 0)
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
                if self._held == 0:
                    self._lockf(fcntl.LOCK_UN, 0)

    def alive(self, pid: int) -> bool:
        """Whether the process `pid` holds its liveness byte on this ledger (this process does)."""
        if pid == self.pid:
            return True
        try:
            if not self._lockf(fcntl.LOCK_EX | fcntl.LOCK_NB, LIVE_BASE + pid):
                return True   # record locks refused: no way to tell, so never take its files
        except OSError:
            return True
        self._lockf(fcntl.LOCK_UN, LIVE_BASE + pid)
        return False

    def key_lock(self, name: str, wait: float) -> KeyHold:
        """Hold the lock of one cache key (its hex name) against every other fill of it, in this
        process (a lock per key) and in the others (a record lock on the key's byte), waiting at
        most `wait` seconds; the hold's `held` is False when another fill kept it that long."""
        offset = 1 + int(name[-16:], 16) % KEY_LOCK_SPACE   # the whole key's digits: variants fill apart
        deadline = time.monotonic() + wait
        with self._keys_mutex:
            local = self._keys.setdefault(offset, [threading.Lock(), 0])
            local[1] += 1
        if local[0].acquire(timeout=wait):
            while True:
                try:
                    self._lockf(fcntl.LOCK_EX | fcntl.LOCK_NB, offset)   # refused: in-process only
                    return KeyHold(lambda: self._unlock_key(offset, local, True))
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(KEY_LOCK_POLL)
            local[0].release()
        self._unlock_key(offset, local, False)
        return KeyHold(None)

    def _unlock_key(self, offset: int, local: list, held: bool) -> None:
        if held:
            self._lockf(fcntl.LOCK_UN, offset)
            local[0].release()
        with self._keys_mutex:
            local[1] -= 1
            if local[1] == 0:
                del self._keys[offset]

    def _lockf(self, operation: int, offset: int) -> bool:
        """Lock or unlock one byte; False when the OS refuses record locks (logged once).
        OSError when another process holds it (a non-blocking try)."""
        if oscalls.was_refused("fcntl.lockf"):
            return False
        try:
            fcntl.lockf(self._fd, operation, 1, offset)
            return True
        except OSError as exc:
            if not oscalls.is_refusal(exc):
                raise
            oscalls.note_refused("fcntl.lockf", exc.errno,
                                 "the cache's books are shared across processes without a lock")
            return False
