"""Fills of answers whose length the origin did not announce (chunked or close-delimited).

Mixed into Cache (core/cache.py), like CacheBooks and CachePurges. A fill of
a known length reserves it before writing; here the length is known only at
the end, so the header is written with room for any size (spaces that JSON
ignores), the reservation grows in steps as bytes land (evicting for room as
a known length does), and the header is rewritten in place with the real
size before the rename. The fill's owner (the request that started it)
tails the temp file as it grows; requests that joined wait for its end and
then read the stored entry. When the body passes the cache's cap (or cannot
fit beside the fills in flight), the partial fill is discarded and the rest
of the origin's stream goes to the owner straight, uncached: the joined
requests then ask the origin on their own.
"""

import dataclasses
import itertools
import os
import threading
from collections.abc import Callable

from contentnode.core.cache_entries import LruOrder, header_bytes, new_uid
from contentnode.core.cache_fill import Fill, FillAbandoned, OriginAnswer
from contentnode.core.cache_ledger import CacheLedger
from contentnode.fileio import write_all

GROW_STEP = 1 << 20          # the first reservation past the header; then it doubles up to the cap
UNKNOWN_SIZE = 10 ** 15      # the header's placeholder: as many digits as any real size has


class CacheUnsized:
    """The unannounced-length half of Cache's fills; the attributes below are Cache's own."""

    ledger: CacheLedger
    clock: Callable[[], float]
    _lock: threading.Lock
    _order: LruOrder
    _end_fill: Callable[..., None]
    _commit: Callable[..., None]
    _needs_room: Callable[[int], bool]
    _reserve: Callable[[Fill, int], bool]
    _known_by_name: Callable[[], dict]

    def _store_unsized(self, fill: Fill, answer: OriginAnswer, ttl: int) -> bool:
        """Fill `answer` (length None) into the cache; True when its stream was handed away (to
        the owner, past the cap), so the caller must not close it."""
        now, uid = self.clock(), new_uid()
        expires = now + ttl if answer.expires_at is None else min(now + ttl, answer.expires_at)
        header = {"key": list(fill.key), "size": UNKNOWN_SIZE, "id": uid, "meta": answer.meta,
                  "stored_at": now, "expires_at": expires}
        head = header_bytes(header)
        if not self._grow(fill, len(head), len(head) + GROW_STEP):
            self._end_fill(fill, streamed=True, handed=answer)
            return True
        written = 0
        fd = os.open(fill.tmp_path, os.O_WRONLY)
        try:
            write_all(fd, head)
            fill.progress(answer=answer, offset=len(head))
            chunks = iter(answer.chunks)
            for chunk in chunks:
                if fill.abandoned:
                    raise FillAbandoned("no reader is left")
                need = len(head) + written + len(chunk)
                if need > fill.reserved and not self._grow(fill, need, 2 * fill.reserved):
                    rest = OriginAnswer(200, answer.meta, None, itertools.chain([chunk], chunks), answer.close)
                    self._hand_over(fill, rest)
                    return True
                write_all(fd, chunk)
                written += len(chunk)
                fill.progress(written=written)
            final = header_bytes(dict(header, size=written), width=len(head))
            if os.pwrite(fd, final, 0) != len(final):
                raise OSError("short write of a cache entry's header")
            self._shrink(fill, fd, len(head) + written)
            if ttl > 0:
                os.fsync(fd)
            os.utime(fd, ns=(int(now * 1e9),) * 2)
        finally:
            os.close(fd)
        self._commit(fill, ttl, dataclasses.replace(answer, length=written), (len(head), uid, now, expires))
        return False

    def _hand_over(self, fill: Fill, rest: OriginAnswer) -> None:
        """Past the cap: the partial fill goes (its owner still reads it through its open
        descriptor) and the owner takes the rest of the stream; closed here if it left."""
        self._end_fill(fill, overflow=True, handed=rest)
        if fill.abandoned:
            taken = fill.take_handed()
            if taken is not None:
                taken.close()

    def _grow(self, fill: Fill, need: int, want: int) -> bool:
        """Reserve `want` bytes for the fill (at least `need`, at most the cap), evicting for
        room; False when the `need` bytes cannot fit."""
        if need > self.ledger.max_bytes:
            return False
        size = min(max(need, want), self.ledger.max_bytes)
        more = size - fill.reserved
        walked = self._order.walk() if self._needs_room(more) and self._order.stale() else None
        with self._lock:
            if walked is not None and self._order.stale():
                self._order.rebuild(self._known_by_name(), int(self.clock() * 1e9), walked)
            return not fill.abandoned and self._reserve(fill, size)

    def _shrink(self, fill: Fill, fd: int, size: int) -> None:
        """Give back what the fill reserved beyond its body."""
        with self._lock, self.ledger.books():
            os.ftruncate(fd, size)
            self.ledger.add(total=size - fill.reserved)
            fill.reserved = size

    @staticmethod
    def _joined_unsized(fill: Fill) -> bool:
        """A request that joined a fill of unannounced length waits for its end: True once it
        is stored (look the key up again), False when it passed the cap or every reader left
        (ask the origin alone)."""
        try:
            return fill.wait_end()
        except FillAbandoned:
            return False
