"""The cache's books, shared by every process that serves the public port.

Each process keeps its own cache index in memory, but the disk budget and
purges belong to the node: with public workers (contentnode/workers.py) a
purge made in the daemon must reach the workers' memory, and every process's
fills count against the one `cache_max_bytes`. These few numbers live in a
small file, `<cache>/ledger`, that every process maps into memory:

- generation: raised by every purge; a process that sees it change forgets
  its in-memory view (index and small bodies) and finds entries on disk again;
- max_bytes, total (bytes of entry files on disk) and, per process slot, the
  bytes reserved by fills in flight (a dead worker's slot is reset).

Updates that must not interleave across processes (check room then reserve;
unlink or replace an entry file, then count it) run under a POSIX record lock
on byte 0 of that file. The same file gives single flight across processes: a
fill holds the lock byte its key hashes to. With one process the page is
private memory, no file, and no file lock is ever taken.
"""

import contextlib
import fcntl
import mmap
import os
import struct
import threading
import time

from contentnode import oscalls

_WORD = struct.Struct("=q")
GENERATION, MAX_BYTES, TOTAL, FIRST_SLOT = 0, 1, 2, 3   # word indexes in the page
KEY_LOCK_SPACE = 1 << 40              # key lock bytes live at 1 .. 2**40
KEY_LOCK_POLL = 0.01


class CacheLedger:
    """Shared counters for `processes` slots (0: the daemon, 1..N: public workers).

    The daemon creates the ledger (`max_bytes` given: the books start from zero);
    a worker attaches to the daemon's (`max_bytes` None) and counts under `slot`.
    """

    def __init__(self, path: str, processes: int = 1, max_bytes: int | None = None, slot: int = 0):
        self.shared = processes > 1
        self.processes = processes
        self.slot = slot
        size = _WORD.size * (FIRST_SLOT + processes)
        self._fd = -1
        if self.shared:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            if max_bytes is not None:
                os.ftruncate(self._fd, 0)
                os.ftruncate(self._fd, size)
            elif os.fstat(self._fd).st_size != size:
                raise RuntimeError(f"cache ledger {path} is not the daemon's (size differs)")
            self._page = mmap.mmap(self._fd, size)
        else:
            self._page = mmap.mmap(-1, size)
        self._held = 0            # nesting depth of books() in this process
        self._thread_lock = threading.RLock()
        if max_bytes is not None:
            self._set(MAX_BYTES, max_bytes)

    def _get(self, index: int) -> int:
        return _WORD.unpack_from(self._page, _WORD.size * index)[0]

    def _set(self, index: int, value: int) -> None:
        _WORD.pack_into(self._page, _WORD.size * index, value)

    # -- reads (no lock: aligned 8-byte words) ------------------------------------

    def generation(self) -> int:
        return self._get(GENERATION)

    @property
    def max_bytes(self) -> int:
        return self._get(MAX_BYTES)

    @property
    def total(self) -> int:
        return self._get(TOTAL)

    def filling(self) -> int:
        return sum(self._get(FIRST_SLOT + i) for i in range(self.processes))

    # -- updates (callers hold books()) --------------------------------------------

    def set_max_bytes(self, value: int) -> None:
        self._set(MAX_BYTES, value)

    def add_total(self, delta: int) -> None:
        self._set(TOTAL, self.total + delta)

    def add_filling(self, delta: int) -> None:
        self._set(FIRST_SLOT + self.slot, self._get(FIRST_SLOT + self.slot) + delta)

    def bump_generation(self) -> int:
        with self.books():
            generation = self.generation() + 1
            self._set(GENERATION, generation)
            return generation

    def reset_slot(self, slot: int) -> None:
        """A worker died: whatever its fills had reserved is no longer in flight."""
        with self.books():
            self._set(FIRST_SLOT + slot, 0)

    @contextlib.contextmanager
    def books(self):
        """Exclusive across threads and processes; re-entrant within this process (a POSIX
        record lock is per process: an inner unlock would release the outer hold)."""
        with self._thread_lock:
            if self.shared and self._held == 0:
                self._lockf(fcntl.LOCK_EX, 0)
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
                if self.shared and self._held == 0:
                    self._lockf(fcntl.LOCK_UN, 0)

    @contextlib.contextmanager
    def key_lock(self, name: str, wait: float):
        """Hold the lock byte of one cache key (its hex name) across processes, waiting at most
        `wait` seconds; yields False when another process kept it that long."""
        if not self.shared:
            yield True
            return
        offset = 1 + int(name[:16], 16) % KEY_LOCK_SPACE
        deadline = time.monotonic() + wait
        locked = None   # True: held; False: record locks refused, go on unlocked; None: kept by another
        while locked is None:
            try:
                locked = self._lockf(fcntl.LOCK_EX | fcntl.LOCK_NB, offset)
            except OSError:   # another process holds it (EAGAIN or EACCES)
                if time.monotonic() >= deadline:
                    break
                time.sleep(KEY_LOCK_POLL)
        try:
            yield locked is not None
        finally:
            if locked:
                self._lockf(fcntl.LOCK_UN, offset)

    def _lockf(self, operation: int, offset: int) -> bool:
        """Lock or unlock one byte; False when the OS refuses record locks (logged once).

        Without them the processes still share the numbers but not exclusion: two fills
        may both pass the budget check, and a key missed by two processes is filled twice.
        """
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
