"""The fill side of the disk cache: single flight, reservations, the copy and the commit.

Mixed into Cache (core/cache.py), like CacheBooks, CachePurges and
CacheUnsized. get() answers a hit or joins the one fill of a key (starting it
when none runs): the fill holds its key's lock in the process and across
processes, reserves its size in the shared books (evicting the least recently
used files of the whole folder for room), copies the origin's body into a temp
file that every joined request tails, and commits by a rename under the books
lock only if no purge ran since it started (core/cache.py says why).
"""

import os
import threading
from collections.abc import Callable

from contentnode.core.cache_entries import (Entry, LruOrder, file_size, header_bytes, key_name, new_uid,
                                            remove_if_present, temp_name)
from contentnode.core.cache_fill import (STALL_TIMEOUT, Fill, FillAbandoned, FillTruncated, OriginAnswer, Result,
                                         streamed)
from contentnode.core.cache_ledger import OBJECT_DIGITS, CacheLedger
from contentnode.core.fill_threads import FillThreads
from contentnode.fileio import ensure_private_dir, write_all

KEY_LOCK_WAIT = STALL_TIMEOUT / 2   # how long a fill waits for another fill of its key


class CacheFills:
    """Fills of the cache's keys (the attributes are Cache's: its lock, index, ledger, fills, threads)."""

    clock: Callable[[], float]
    ledger: CacheLedger
    _lock: threading.Lock
    _index: dict[tuple, Entry]
    _fills: dict[tuple, Fill]
    _temps: set[str]
    _order: LruOrder
    _threads: FillThreads
    _hits: int
    _misses: int
    _fresh: Callable[[tuple], Entry | None]
    _forget: Callable[[Entry], None]
    _open_hit: Callable[[Entry], Result]
    _joined_unsized: Callable[[Fill], bool]
    _store_refresh: Callable[[Fill, OriginAnswer, int], None]
    _current_on_disk: Callable[[Entry], Entry | None]

    def get(self, key: tuple, fetch: Callable[[], OriginAnswer], ttl: int,
            usable: Callable[[Entry], bool] | None = None) -> Result:
        """A hit, or a share of the one fill for this key, started here if needed.

        `usable` (the shared cache's revalidation) says whether a kept entry may answer: when
        it says no, the request joins or starts the key's fill as on a miss, and the entry
        stays until that fill replaces it. Raises what `fetch` raised when the origin could not
        be reached at all. An entry that vanishes at every look (purges landing on each fill in
        turn) is answered from the origin, not cached, rather than failed.
        """
        for _ in range(3):
            with self._lock:
                entry = self._fresh(key)
                if entry is not None and usable is not None and not usable(entry):
                    entry = None
                if entry is None:
                    running = self._fills.get(key)
                    owner = running is None
                    fill = self._start_fill(key, fetch, ttl, usable) if running is None else running
                    # opened under the lock: the fill cannot be renamed or removed yet
                    fd = os.open(fill.tmp_path, os.O_RDONLY)
                    fill.readers += 1
                    self._misses += 1
                else:
                    self._hits += 1
                self.ledger.count(self._hits, self._misses)
            if entry is None:
                if owner:
                    self._begin_fill(fill, fetch, ttl)
                result = self._join(fill, fd, fetch, owner)
            else:
                result = self._open_hit(entry)
            if result is not None:
                return result
        return self._stream(fetch)

    def _join(self, fill, fd, fetch, owner: bool):
        """This request's share of a fill. The owner (who started it) also gets an answer the
        cache does not keep: one too large, handed over whole, or one that is its own."""
        try:
            answer = fill.wait_ready()
        except BaseException:
            os.close(fd)
            self._leave(fill)
            handed = fill.take_handed() if owner else None
            if handed is not None:
                handed.close()
            raise
        if fill.refreshed is not None:   # a 304 refreshed the stored entry: read it as a hit
            os.close(fd)
            self._leave(fill)
            result = self._open_hit(fill.refreshed)
            if result is not None:
                result.refreshed = True
            return result
        if answer is not None and answer.length is None and not owner and not fill.streamed:
            os.close(fd)
            self._leave(fill)
            return None if self._joined_unsized(fill) else self._stream(fetch)
        if fill.adopted or fill.streamed or answer.status != 200:
            os.close(fd)
            self._leave(fill)
            if fill.adopted:
                return None
            if fill.streamed:
                handed = fill.take_handed() if owner else None
                return streamed(handed) if handed is not None else self._stream(fetch)
            return Result(answer.status, answer.meta, 0, False)
        return Result(200, answer.meta, answer.length, False, fill=fill, fd=fd,
                      on_close=lambda: self._leave(fill))

    @staticmethod
    def _stream(fetch) -> Result:
        return streamed(fetch())

    def _leave(self, fill: Fill) -> None:
        """One reader is done with the fill; the last one to leave before the end stops it. Its
        thread keeps the key's lock until it has stopped: a new fill of the key waits for it."""
        with self._lock:
            fill.readers -= 1
            if fill.readers == 0 and not fill.done:
                fill.abandoned = True
                if self._fills.get(fill.key) is fill:
                    del self._fills[fill.key]

    def _start_fill(self, key, fetch, ttl, usable=None):
        name = key_name(key)
        tmp_path = os.path.join(self._tmp, temp_name(self.ledger.pid, name))
        os.close(os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        fill = Fill(key, tmp_path)
        fill.usable = usable
        self._temps.add(os.path.basename(tmp_path))
        fill.generation, fill.touched = self._seen[0], self.ledger.touched()
        fill.object = name[:OBJECT_DIGITS]
        self._fills[key] = fill
        return fill

    # -- filling --------------------------------------------------------------

    def _begin_fill(self, fill, fetch, ttl):
        """The fill's start, in the thread of the request that started it (which waits for the
        answer anyway): take the key's lock, ask the origin. An answer that is not stored (the
        owner's own, a refusal) ends the fill here, so the commonest uncached miss crosses no
        thread; one to store is copied into the cache by a kept thread (core/fill_threads.py),
        which every joined request (the owner too) tails, unless its body is at hand (a
        compressed variant): that one is stored here, as is a 304's refresh (its head appended to
        the stored entry, core/cache_refresh.py). A fill that waited for another one (of this
        process or another) finds its entry on disk and hands that to its readers."""
        fill.key_hold = self.ledger.key_lock(key_name(fill.key), KEY_LOCK_WAIT)
        answer, storing = None, False
        try:
            with self._lock:
                discarded = fill.discard
                entry = None if discarded else self._fresh(fill.key)
                if entry is not None and fill.usable is not None and not fill.usable(entry):
                    # another process may have refreshed or replaced it since this one read it
                    entry = self._current_on_disk(entry)
                    if entry is not None and not fill.usable(entry):
                        entry = None
            if discarded or entry is not None:
                # purged while it waited for the lock, it stops before fetching what it would not
                # keep; either way its readers look the key up again (and fill it anew if need be)
                self._end_fill(fill, adopted=True)
                return
            answer = fetch()
            if answer.status != 200:
                self._end_fill(fill, answer=answer, done=True)
                return
            if not answer.shared:   # the owner's own: it streams it, the others ask on their own
                answer, handed = None, answer
                self._end_fill(fill, streamed=True, handed=handed)
                return
            storing = True   # the answer and the key's lock are the store's now
            if answer.refresh_of is not None:   # a 304: the stored body stays, its head is refreshed
                self._store_refresh(fill, answer, ttl)
            elif answer.at_hand:   # nothing to wait for: no thread to wake
                self._store_fill(fill, answer, ttl)
            else:
                self._threads.run(self._store_fill, fill, answer, ttl)
        except BaseException as exc:  # every failure must reach the waiting readers
            self._end_fill(fill, error=exc)
        finally:
            if not storing:
                if answer is not None:
                    answer.close()
                fill.key_hold.release()

    def _store_fill(self, fill, answer, ttl):
        """Copy and commit the origin's answer (a kept thread), then release the key's lock."""
        try:
            self._store(fill, answer, ttl)
        finally:
            fill.key_hold.release()

    def _store(self, fill, answer, ttl):
        try:
            if answer.length is None:
                if self._store_unsized(fill, answer, ttl):
                    answer = None   # handed to the fill's owner
                return
            now, uid = self.clock(), new_uid()
            expires = now + ttl if answer.expires_at is None else min(now + ttl, answer.expires_at)
            header = header_bytes({"key": list(fill.key), "size": answer.length, "id": uid,
                                    "meta": answer.meta, "stored_at": now, "expires_at": expires})
            size = len(header) + answer.length
            walked = self._order.walk() if self._needs_room(size) and self._order.stale() else None
            with self._lock:
                if walked is not None and self._order.stale():
                    self._order.rebuild(self._known_by_name(), int(now * 1e9), walked)
                room = not fill.abandoned and self._reserve(fill, size)
            if not room:
                # too large or no room: the owner gets this very answer, the others their own
                answer, handed = None, answer
                self._end_fill(fill, streamed=True, handed=handed)
                return
            fd = os.open(fill.tmp_path, os.O_WRONLY)
            try:
                write_all(fd, header)
                fill.progress(answer=answer, offset=len(header))
                self._copy(fill, fd, answer, sync=ttl > 0)
                os.utime(fd, ns=(int(now * 1e9),) * 2)
            finally:
                os.close(fd)
            self._commit(fill, ttl, answer, (len(header), uid, now, expires))
        except BaseException as exc:  # every failure must reach the waiting readers
            self._end_fill(fill, error=exc)
        finally:
            if answer is not None:
                answer.close()

    def _reserve(self, fill, size: int) -> bool:
        """Count a fill's size in the books before writing it (or grow what it counted to `size`),
        its temp file sized to match (lock held): evict the least recently used files for room;
        False when it cannot fit beside the other fills in flight."""
        more = size - fill.reserved
        if fill.discard or size > self.ledger.max_bytes or more <= 0:
            return False
        with self.ledger.books():
            if not self._make_room(more):
                return False
            os.truncate(fill.tmp_path, size)
            self.ledger.add(total=more)
        fill.reserved = size
        return True

    def _needs_room(self, size: int) -> bool:
        return self.ledger.total + size > self.ledger.max_bytes

    def _make_room(self, size: int) -> bool:
        """Evict until `size` more bytes fit under the cap (both locks held)."""
        while self._needs_room(size):
            found = self._order.victim(lambda e: self._index.get(e.key) is e, self._known_by_name,
                                       int(self.clock() * 1e9))
            if found is None:
                return False
            path, st, entry = found
            remove_if_present(path)
            self.ledger.add(total=-st.st_size, entries=-1, removals=1)
            if entry is not None:
                self._forget(entry)
        return True

    def _known_by_name(self) -> dict:
        return {os.path.basename(entry.path): entry for entry in self._index.values()}

    def _end_fill(self, fill, **outcome):
        """Forget a fill that leaves no entry, give back its reservation and wake its readers."""
        with self._lock:
            if self._fills.get(fill.key) is fill:
                del self._fills[fill.key]
            self._drop_temp(fill)
        fill.progress(**outcome)

    def _drop_temp(self, fill) -> None:
        """(Lock held.)"""
        with self.ledger.books():
            size = file_size(fill.tmp_path)
            remove_if_present(fill.tmp_path)
            self._temps.discard(os.path.basename(fill.tmp_path))
            self.ledger.add(total=-size)
        fill.reserved = 0

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

    def _commit(self, fill, ttl, answer, stored):
        """Make the filled file an entry, unless it is uncacheable or a purge ran since the fill
        started (decided and renamed under the books lock, which purges hold)."""
        with self._lock:
            if self._fills.get(fill.key) is fill:
                del self._fills[fill.key]
            path = self._path(fill.key)
            with self.ledger.books():
                kept = (not fill.discard and ttl > 0
                        and self.ledger.kept_since(fill.generation, fill.touched, fill.object))
                if kept:
                    ensure_private_dir(os.path.dirname(path))
                    replaced = file_size(path)
                    os.replace(fill.tmp_path, path)
                    self._temps.discard(os.path.basename(fill.tmp_path))
                    fill.reserved = 0
                    self.ledger.add(total=-replaced, entries=0 if replaced else 1, removals=1 if replaced else 0)
                else:
                    self._drop_temp(fill)
            if kept:
                offset, uid, now, expires = stored
                old = self._index.get(fill.key)
                if old is not None:
                    self._forget(old)
                entry = Entry(fill.key, path, offset, answer.length, answer.meta, now, expires, now,
                              uid=uid, used=now, tick=next(self._ticks))
                self._indexed(entry, entry.last_use())
        fill.progress(written=answer.length, done=True)
