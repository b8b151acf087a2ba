"""One origin fetch in flight and the requests reading it (core/cache.py runs them).

A fill fetches the origin into a temp file on a thread of its own while every
request that joined it tails that file (Result.chunks waits on the fill's
condition); a hit reads an entry's file or the body held in memory; an object
the cache does not keep is a StreamedResult, the request's own origin stream.
Here are those reader-side objects and the errors a reader may meet.
"""

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from contentnode.core.bodies import FileBody, StreamBody
from contentnode.core.cache_entries import Entry
from contentnode.core.cache_ledger import KeyHold

CHUNK = 256 * 1024
STALL_TIMEOUT = 60.0     # a fill that makes no progress this long fails its readers


class FillStalled(Exception):
    """The origin stopped sending (or never answered) within STALL_TIMEOUT."""


class FillTruncated(Exception):
    """The origin closed before sending the length it announced."""


class FillAbandoned(Exception):
    """Every reader of a fill went away: the origin download stops."""


@dataclass
class OriginAnswer:
    """What a fetcher returns: the origin's status, and for a 200 its body.

    meta holds what is served back (content_type, etag, last_modified). Only a
    200 is cached; any other status is handed to the waiting requests as is.
    `expires_at` (cache clock) ends the entry sooner than its ttl: an object
    derived from another entry must not outlive it. `shared` False: the answer
    is the requester's own (a shared cache may not store it nor hand it to
    anyone else): the request that started the fill streams it straight from
    the origin, the others ask the origin on their own; `length` may then be
    None (the origin announced none). `at_hand`: the body is already here (in
    memory, or the cache's own entry for a 304's refresh), so the request that
    started the fill stores it itself instead of handing it to a thread.
    `refresh_of`: the stored entry a 304 refreshes; `meta` is its new head, and
    the body stays where it is (core/cache_refresh.py). `body`: an answer that is
    not shared, already read whole (it came with its head): sent from memory.
    """

    status: int
    meta: dict = field(default_factory=dict)
    length: int | None = 0
    chunks: Iterable[bytes] = ()
    close: Callable[[], None] = lambda: None
    expires_at: float | None = None
    shared: bool = True
    at_hand: bool = False
    refresh_of: Entry | None = None
    body: bytes | None = None


class SharedFile:
    """One open descriptor of a large entry's file, shared by the hits that send it.

    It saves an open and a close per hit; it is closed once retired (the entry
    was dropped or replaced, or OPEN_FILES newer ones were hit) and unused.
    """

    __slots__ = ("fd", "users", "retired")

    def __init__(self, fd: int):
        self.fd, self.users, self.retired = fd, 0, False


class Result:
    """One request's view of a cached or filling object.

    hit: served from an entry already on disk: `body` holds a small one's
    bytes, else use open_file and sendfile; otherwise `chunks(start, end)`
    tails the fill. status != 200 means the origin refused and there is no body.
    """

    def __init__(self, status, meta, size, hit, entry=None, fill=None, fd=None, body=None, on_close=None,
                 shared_fd=None):
        self.status, self.meta, self.size, self.hit = status, meta, size, hit
        self.entry, self._fill, self._fd, self.body = entry, fill, fd, body
        self._on_close = on_close
        self._shared_fd = shared_fd   # a descriptor this Result reads but does not close
        self._rest: OriginAnswer | None = None   # an overflowed fill's origin stream, read past the cap
        self.refreshed = False   # a hit on the entry this request's revalidation just refreshed (a 304)

    def open_file(self):
        """(fd, body offset) of a hit; close() closes fd (opened here for a body held in memory)."""
        if self._shared_fd is not None:
            return self._shared_fd, self.entry.offset
        if self._fd is None:
            self._fd = os.open(self.entry.path, os.O_RDONLY)
        return self._fd, self.entry.offset

    def chunks(self, start: int = 0, end: int | None = None):
        """Body bytes [start, end) as they arrive from the origin (or from the file of a hit)."""
        end = self.size if end is None else end
        if self.body is not None:
            if start < end:
                yield self.body[start:end]
            return
        fd = self._fd if self._shared_fd is None else self._shared_fd
        if end is None:   # a fill of a length the origin never announced: until its end
            yield from self._tail(fd, start)
            return
        base = self.entry.offset if self.hit else self._fill.offset
        pos = start
        while pos < end:
            if self._fill is not None:
                avail = min(self._fill.wait_for(pos), end)
            else:
                avail = end
            data = os.pread(fd, min(avail - pos, CHUNK), base + pos)
            if not data:
                raise FillTruncated("cache file shorter than its header says")
            pos += len(data)
            yield data

    def _tail(self, fd: int, pos: int):
        """A fill of unannounced length as it lands; when it passed the cache's cap, the rest
        straight from the origin (handed to the fill's owner, the one reader it then has)."""
        fill = self._fill
        while (avail := fill.wait_more(pos)) is not None:
            while pos < avail:
                data = os.pread(fd, min(avail - pos, CHUNK), fill.offset + pos)
                if not data:
                    raise FillTruncated("cache file shorter than what was written")
                pos += len(data)
                yield data
        rest = fill.take_handed()
        if rest is not None:
            self._rest = rest
            yield from rest.chunks

    def sendable(self, start: int, end: int):
        """Bytes [start, end) in the form this result sends best, which then owns this Result:
        bytes held in memory (ended here), the entry file's span for sendfile on a hit, else
        the fill's (or the origin's) stream. Sending the body, then its close, ends it."""
        if self.body is not None:
            self.close()
            return self.body if (start, end) == (0, len(self.body)) else self.body[start:end]
        if self.hit:
            fd, base = self.open_file()
            return FileBody(fd, base + start, end - start, self.close)
        return StreamBody(self.chunks(start, end), end - start, self.close)

    def read_all(self) -> bytes:
        """The whole body; for a fill, returns once the entry is stored (warm relies on it)."""
        try:
            data = b"".join(self.chunks())
            self.wait_stored()
            return data
        finally:
            self.close()

    def wait_stored(self):
        """Block until this fill has ended (entry stored, or dropped as uncacheable)."""
        if self._fill is not None:
            self._fill.wait_done()

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._on_close is not None:
            self._on_close, on_close = None, self._on_close
            on_close()
        if self.size is None and self._fill is not None:   # an overflowed fill's stream, unread or read
            rest, self._rest = self._fill.take_handed() or self._rest, None
            if rest is not None:
                rest.close()


class StreamedResult(Result):
    """An object the cache does not hold (larger than the cap, or no room beside the fills in
    flight): this request's own origin stream, passed through without touching the disk."""

    def __init__(self, answer: OriginAnswer):
        super().__init__(200, answer.meta, answer.length, False, body=answer.body)
        self._answer = answer

    def chunks(self, start: int = 0, end: int | None = None):
        end = self.size if end is None else end
        if end is None:   # a length the origin never announced: all it sends
            yield from self._answer.chunks
            return
        pos = 0
        for chunk in self._answer.chunks:
            if pos >= end:
                break
            low, high = max(start - pos, 0), min(end - pos, len(chunk))
            if low < high:
                yield bytes(chunk[low:high])
            pos += len(chunk)
        if pos < end:
            raise FillTruncated("origin sent less than announced")

    def wait_stored(self):
        """Nothing is stored."""

    def close(self):
        self._answer.close()


def streamed(answer: OriginAnswer) -> Result:
    """A request's own origin answer as its Result: the body streams through, or none for a status."""
    if answer.status != 200:
        answer.close()
        return Result(answer.status, answer.meta, 0, False)
    return StreamedResult(answer)


class Fill:
    """One origin fetch in progress; readers wait on its condition."""

    def __init__(self, key, tmp_path):
        self.key = key
        self.tmp_path = tmp_path
        self.cond = threading.Condition()
        self.answer = None       # OriginAnswer once headers are known
        self.offset = 0          # body offset in the temp file
        self.written = 0         # body bytes on disk so far
        self.done = False
        self.error = None
        self.discard = False     # set by a purge during the fill: do not commit
        self.streamed = False    # not cached: each reader but the owner fetches its own stream
        self.overflow = False    # an unannounced length passed the cap: the rest goes to the owner, uncached
        self.handed = None       # a streamed fill's answer, handed whole to the owner (take_handed)
        self.usable = None       # (entry) -> bool: whether an entry found meanwhile serves this fill's readers
        self.readers = 0         # requests holding a share of this fill (cache lock)
        self.abandoned = False   # readers fell to 0 before the end: stop downloading
        self.reserved = 0        # bytes counted against the cap while in flight
        self.adopted = False     # readers look the key up again: another fill stored it meanwhile, or a
                                 # purge dropped this one before it fetched
        self.generation = 0      # the ledger's purge generation when the fill started: a prefix or whole purge since drops it
        self.touched = 0         # the ledger's count of objects URL purges touched then: its own one's since drop it
        self.object = ""         # its object, as the ledger's rings of invalidations name it
        self.key_hold = KeyHold(None)   # its key's lock, once the fill holds it
        self.refreshed: Entry | None = None   # the entry a 304 refreshed in place: its readers read it

    def wait_ready(self):
        with self.cond:
            if not self.cond.wait_for(lambda: self.answer or self.error or self.streamed or self.adopted,
                                      STALL_TIMEOUT):
                raise FillStalled("origin did not answer in time")
            if self.error is not None and self.answer is None:
                raise self.error
            return self.answer

    def take_handed(self):
        """The answer a streamed fill handed over (once), or None."""
        with self.cond:
            answer, self.handed = self.handed, None
            return answer

    def wait_for(self, pos: int) -> int:
        """Block until body bytes past `pos` are on disk; return how many are."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.written > pos or self.error or self.done,
                                      STALL_TIMEOUT):
                raise FillStalled("origin stalled")
            if self.written > pos:
                return self.written
            raise self.error or FillTruncated("origin sent less than announced")

    def wait_more(self, pos: int) -> int | None:
        """For a fill of unannounced length: block until body bytes past `pos` are on disk and
        return how many are, or None at its end (stored, or passed the cap)."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.written > pos or self.error or self.done or self.overflow,
                                      STALL_TIMEOUT):
                raise FillStalled("origin stalled")
            if self.written > pos:
                return self.written
            if self.error is not None:
                raise self.error
            return None

    def wait_end(self) -> bool:
        """Block while the fill makes progress; True when it was stored whole, False when it
        passed the cap (FillStalled after STALL_TIMEOUT without progress; its error if it failed)."""
        with self.cond:
            seen = -1
            while not (self.done or self.error or self.overflow):
                if not self.cond.wait_for(lambda seen=seen: self.done or self.error or self.overflow
                                          or self.written != seen, STALL_TIMEOUT):
                    raise FillStalled("origin stalled")
                seen = self.written
            if self.error is not None:
                raise self.error
            return self.done

    def wait_done(self):
        with self.cond:
            if not self.cond.wait_for(lambda: self.done or self.error or self.overflow, STALL_TIMEOUT):
                raise FillStalled("fill did not finish")
            if self.error is not None:
                raise self.error

    def progress(self, **changes):
        with self.cond:
            for name, value in changes.items():
                setattr(self, name, value)
            self.cond.notify_all()
