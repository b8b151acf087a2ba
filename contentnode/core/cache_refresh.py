"""A 304's refresh of a stored answer: its new head appended to the entry's file, no body moved.

Mixed into Cache (core/cache.py), like CacheFills. The fill of a revalidation
holds its key's lock (in the process and across processes); a 304 that may
refresh the stored answer hands the fill an OriginAnswer with `refresh_of`
(the stored entry) and the refreshed meta. Under the cache and books locks
the head record is written after the last whole one (a torn one after it is
written over), the books count the bytes it adds (evicting for room like a
fill). It is not fsynced: other processes read it from the page cache, and
after a power loss a record that did not reach the disk is torn or missing,
so its CRC-32 makes readers keep the head before it (the answer is stale
again and revalidated), as a cache may; a fill, whose body has no checksum,
is fsynced before it is renamed in. The
index then holds a new Entry (same file, id and body, the next head
number), so whatever a process kept per entry (the parsed head, a body held
in memory) is made anew. A file holding MAX_HEADS records, or whose records
would pass MAX_HEADS_BYTES, is rewritten instead: its body is copied into a
new file with the new head as its first header, renamed over as a fill is
(core/cache_entries.py has the layout).
"""

import os
import threading
from collections.abc import Callable, Iterator

from contentnode.core.cache_entries import (MAX_HEADS, MAX_HEADS_BYTES, Entry, head_record, header_uid,
                                            read_heads)
from contentnode.core.cache_fill import CHUNK, Fill, OriginAnswer
from contentnode.core.cache_ledger import CacheLedger
from contentnode.fileio import write_all


class CacheRefresh:
    """Refreshes of the cache's entries (the attributes are Cache's: its lock, index, ledger)."""

    clock: Callable[[], float]
    ledger: CacheLedger
    _lock: threading.Lock
    _index: dict[tuple, Entry]
    _forget: Callable[[Entry], None]
    _indexed: Callable[[Entry, tuple], None]
    _make_room: Callable[[int], bool]
    _end_fill: Callable[..., None]
    _store_fill: Callable[[Fill, OriginAnswer, int], None]
    _open_current: Callable[[Entry], int | None]
    _ticks: Iterator[int]

    def _store_refresh(self, fill: Fill, answer: OriginAnswer, ttl: int) -> None:
        """Store a 304's refresh (the request's thread, key lock held, released here): a head
        appended, or the whole entry rewritten when its file holds its most heads."""
        try:
            entry = self._append_head(fill, answer, ttl)
            if entry is not None:
                self._end_fill(fill, answer=answer, refreshed=entry)
                fill.key_hold.release()
                return
            answer = self._with_body(answer)
        except BaseException as exc:  # every failure must reach the waiting readers
            self._end_fill(fill, error=exc)
            fill.key_hold.release()
            return
        self._store_fill(fill, answer, ttl)

    def _append_head(self, fill: Fill, answer: OriginAnswer, ttl: int) -> Entry | None:
        """The refreshed entry once its head is appended; None when the file must be
        rewritten instead (its heads are at their cap, no room, or a purge ran since the fill began)."""
        stale = answer.refresh_of
        assert stale is not None
        now = self.clock()
        expires = now + ttl if answer.expires_at is None else min(now + ttl, answer.expires_at)
        record = head_record({"meta": answer.meta, "stored_at": now, "expires_at": expires})
        fd = _open_for_append(stale)
        try:
            body_end = stale.offset + stale.size
            with self._lock, self.ledger.books():
                size = os.fstat(fd).st_size
                _last, count, end = read_heads(fd, body_end, size)
                grows = end + len(record) - size
                if (fill.discard or ttl <= 0
                        or not self.ledger.kept_since(fill.generation, fill.touched, fill.object)
                        or count >= MAX_HEADS or end + len(record) - body_end > MAX_HEADS_BYTES
                        or not self._make_room(max(grows, 0)) or os.fstat(fd).st_nlink == 0):
                    return None
                os.lseek(fd, end, os.SEEK_SET)
                write_all(fd, record)
                os.ftruncate(fd, end + len(record))   # a torn record past the last whole one goes
                self.ledger.add(total=grows)
            os.utime(fd, ns=(int(now * 1e9),) * 2)
        finally:
            os.close(fd)
        entry = Entry(stale.key, stale.path, stale.offset, stale.size, answer.meta, now, expires, now,
                      uid=stale.uid, head=count + 1, used=now)
        with self._lock:
            entry.tick = next(self._ticks)
            if not fill.discard and self.ledger.kept_since(fill.generation, fill.touched, fill.object):
                old = self._index.get(stale.key)
                if old is not None:
                    self._forget(old)
                self._indexed(entry, entry.last_use())
        return entry

    def _with_body(self, answer: OriginAnswer) -> OriginAnswer:
        """The refresh as a whole answer, its body read from the stored entry's file, to be stored
        as a new file."""
        stale = answer.refresh_of
        assert stale is not None
        fd = self._open_current(stale)
        if fd is None:
            raise FileNotFoundError("the stored answer went away while it was revalidated")

        def chunks():
            pos = 0
            while pos < stale.size:
                data = os.pread(fd, min(CHUNK, stale.size - pos), stale.offset + pos)
                if not data:
                    return   # shorter than its header says: the fill finds it truncated
                pos += len(data)
                yield data
        return OriginAnswer(200, answer.meta, stale.size, chunks(), lambda: os.close(fd),
                            expires_at=answer.expires_at, at_hand=True)


def _open_for_append(entry: Entry) -> int:
    """The entry's file opened for writing; FileNotFoundError when it is gone or holds another
    entry now."""
    fd = os.open(entry.path, os.O_RDWR)
    if header_uid(fd) != entry.uid:
        os.close(fd)
        raise FileNotFoundError("the stored answer was replaced while it was revalidated")
    return fd
