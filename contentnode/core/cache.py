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
"""

import hashlib
import json
import os
import struct
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable

from contentnode.fileio import write_all
from contentnode.fileio import ensure_private_dir

MAGIC = b"CNC1"
_PREFIX = struct.Struct(">4sI")
CHUNK = 256 * 1024
STALL_TIMEOUT = 60.0     # a fill that makes no progress this long fails its readers
TOUCH_EVERY = 60.0       # refresh an entry's mtime (its persisted LRU position) at most this often
MAX_HEADER = 64 * 1024
HOT_MAX_OBJECT = 64 * 1024          # bodies up to this size are kept in memory after a hit
HOT_MAX_BYTES = 16 * 1024 * 1024    # the memory all those bodies may hold together


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
    """

    status: int
    meta: dict = field(default_factory=dict)
    length: int = 0
    chunks: Iterable[bytes] = ()
    close: Callable[[], None] = lambda: None


@dataclass
class Entry:
    key: tuple            # (host, path, variant)
    path: str             # file on disk
    offset: int           # where the body starts in the file
    size: int             # body length
    meta: dict
    stored_at: float
    expires_at: float
    touched: float = 0.0
    body: bytes | None = None   # the body in memory, for a small entry that was hit (see HOT_MAX_BYTES)

    @property
    def file_size(self) -> int:
        return self.offset + self.size


class Result:
    """One request's view of a cached or filling object.

    hit: served from an entry already on disk: `body` holds a small one's
    bytes, else use open_file and sendfile; otherwise `chunks(start, end)`
    tails the fill. status != 200 means the origin refused and there is no body.
    """

    def __init__(self, status, meta, size, hit, entry=None, fill=None, fd=None, body=None, on_close=None):
        self.status, self.meta, self.size, self.hit = status, meta, size, hit
        self.entry, self._fill, self._fd, self.body = entry, fill, fd, body
        self._on_close = on_close

    def open_file(self):
        """(fd, body offset) of a hit; close() closes fd (opened here for a body held in memory)."""
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
        fd, base = self._fd, (self.entry.offset if self.hit else self._fill.offset)
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


class StreamedResult(Result):
    """An object the cache does not hold (larger than the cap, or no room beside the fills in
    flight): this request's own origin stream, passed through without touching the disk."""

    def __init__(self, answer: OriginAnswer):
        super().__init__(200, answer.meta, answer.length, False)
        self._answer = answer

    def chunks(self, start: int = 0, end: int | None = None):
        end = self.size if end is None else end
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


class _Fill:
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
        self.streamed = False    # not cached: each reader fetches its own stream
        self.readers = 0         # requests holding a share of this fill (cache lock)
        self.abandoned = False   # readers fell to 0 before the end: stop downloading
        self.reserved = 0        # bytes counted against the cap while in flight

    def wait_ready(self):
        with self.cond:
            if not self.cond.wait_for(lambda: self.answer or self.error or self.streamed, STALL_TIMEOUT):
                raise FillStalled("origin did not answer in time")
            if self.error is not None and self.answer is None:
                raise self.error
            return self.answer

    def wait_for(self, pos: int) -> int:
        """Block until body bytes past `pos` are on disk; return how many are."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.written > pos or self.error or self.done,
                                      STALL_TIMEOUT):
                raise FillStalled("origin stalled")
            if self.written > pos:
                return self.written
            raise self.error or FillTruncated("origin sent less than announced")

    def wait_done(self):
        with self.cond:
            if not self.cond.wait_for(lambda: self.done or self.error, STALL_TIMEOUT):
                raise FillStalled("fill did not finish")
            if self.error is not None:
                raise self.error

    def progress(self, **changes):
        with self.cond:
            for name, value in changes.items():
                setattr(self, name, value)
            self.cond.notify_all()


def _key_name(key: tuple) -> str:
    return hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass")).hexdigest()


def _header_bytes(header: dict) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, len(raw)) + raw


def read_header(fd: int):
    """(header dict, body offset) of an entry file; ValueError if it is not one."""
    prefix = os.pread(fd, _PREFIX.size, 0)
    if len(prefix) != _PREFIX.size:
        raise ValueError("short file")
    magic, length = _PREFIX.unpack(prefix)
    if magic != MAGIC or length > MAX_HEADER:
        raise ValueError("not a cache entry")
    header = json.loads(os.pread(fd, length, _PREFIX.size))
    return header, _PREFIX.size + length


class Cache:
    """The node's object cache under `root` (normally <data_dir>/cache)."""

    def __init__(self, root: str, max_bytes: int, clock: Callable[[], float] = time.time):
        self.root = root
        self.max_bytes = max_bytes
        self.clock = clock
        self.filling_bytes = 0  # in-flight fills' sizes, counted against max_bytes with total
        self._tmp = os.path.join(root, "tmp")
        self._lock = threading.Lock()
        self._index: OrderedDict[tuple, Entry] = OrderedDict()
        self._fills: dict[tuple, _Fill] = {}
        self.total = 0
        self._hot: deque = deque()   # entries holding their body in memory, oldest first
        self._hot_bytes = 0
        ensure_private_dir(self._tmp)
        self._load()

    # -- start-up -----------------------------------------------------------

    def _load(self):
        """Rebuild the index from the entry files; drop temp files and torn or foreign files."""
        for name in os.listdir(self._tmp):
            _unlink(os.path.join(self._tmp, name))
        found = []
        for sub in os.listdir(self.root):
            folder = os.path.join(self.root, sub)
            if len(sub) != 2 or not os.path.isdir(folder):
                continue
            for name in os.listdir(folder):
                entry = self._read_entry(os.path.join(folder, name), name)
                if entry is not None:
                    found.append(entry)
        found.sort(key=lambda e: e.touched)
        for entry in found:
            self._index[entry.key] = entry
            self.total += entry.file_size
        with self._lock:
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
            if len(key) != 3 or _key_name(key) != name or st.st_size != offset + header["size"]:
                raise ValueError("torn or misplaced entry")
            return Entry(key, path, offset, header["size"], header["meta"],
                         header["stored_at"], header["expires_at"], st.st_mtime)
        except (ValueError, KeyError, TypeError, OSError):
            _unlink(path)
            return None
        finally:
            os.close(fd)

    # -- lookups --------------------------------------------------------------

    def _path(self, key):
        name = _key_name(key)
        return os.path.join(self.root, name[:2], name)

    def _fresh(self, key):
        """The entry for key if fresh, now the most recently used (lock held)."""
        entry = self._index.get(key)
        if entry is None:
            return None
        if entry.expires_at <= self.clock():
            self._drop(entry)
            return None
        self._index.move_to_end(key)
        return entry

    def _open_hit(self, entry):
        """A Result for a hit (its body in memory when small), or None when the file vanished."""
        body = entry.body
        if body is not None:
            self._touch(entry, entry.path)
            return Result(200, entry.meta, entry.size, True, entry=entry, body=body)
        try:
            fd = os.open(entry.path, os.O_RDONLY)
        except FileNotFoundError:
            with self._lock:
                if self._index.get(entry.key) is entry:
                    self._drop(entry)
            return None
        self._touch(entry, fd)
        if entry.size <= HOT_MAX_OBJECT:
            try:
                body = os.pread(fd, entry.size, entry.offset)
            finally:
                os.close(fd)
            if len(body) != entry.size:
                raise FillTruncated("cache file shorter than its header says")
            self._keep_hot(entry, body)
            return Result(200, entry.meta, entry.size, True, entry=entry, body=body)
        return Result(200, entry.meta, entry.size, True, entry=entry, fd=fd)

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
                return self._join(fill, fd, fetch)
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

    def _leave(self, fill: _Fill) -> None:
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
        while self.total + self.filling_bytes + size > self.max_bytes and self._index:
            self._drop(self._index[next(iter(self._index))])
        if self.total + self.filling_bytes + size > self.max_bytes:
            return False
        self.filling_bytes += size
        fill.reserved = size
        return True

    def _unreserve(self, fill) -> None:
        """Lock held."""
        self.filling_bytes -= fill.reserved
        fill.reserved = 0

    def _start_fill(self, key, fetch, ttl):
        tmp_path = os.path.join(self._tmp, f"{_key_name(key)}.{os.urandom(6).hex()}")
        os.close(os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        fill = _Fill(key, tmp_path)
        self._fills[key] = fill
        thread = threading.Thread(target=self._run_fill, args=(fill, fetch, ttl),
                                  name="cache-fill", daemon=True)
        thread.start()
        return fill

    # -- filling --------------------------------------------------------------

    def _run_fill(self, fill, fetch, ttl):
        answer = None
        try:
            answer = fetch()
            if answer.status != 200:
                self._end_fill(fill, answer=answer, done=True)
                return
            now = self.clock()
            header = _header_bytes({"key": list(fill.key), "size": answer.length,
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
            if not fill.discard and ttl > 0 and size <= self.max_bytes:
                path = self._path(fill.key)
                ensure_private_dir(os.path.dirname(path))
                os.replace(fill.tmp_path, path)
                old = self._index.pop(fill.key, None)
                if old is not None:
                    self.total -= old.file_size
                entry = Entry(fill.key, path, len(header), answer.length, answer.meta,
                              now, now + ttl, now)
                self._index[fill.key] = entry
                self.total += size
                self._evict(keep=fill.key)
            else:
                _unlink(fill.tmp_path)
        fill.progress(written=answer.length, done=True)

    # -- removal --------------------------------------------------------------

    def _drop(self, entry):
        """Remove one entry (lock held)."""
        if self._index.pop(entry.key, None) is not None:
            self.total -= entry.file_size
            _unlink(entry.path)

    def _evict(self, keep):
        """Drop least recently used entries until the total fits (lock held)."""
        while self.total > self.max_bytes and self._index:
            key = next(iter(self._index))
            if key == keep:
                break
            self._drop(self._index[key])

    def set_limit(self, max_bytes: int):
        with self._lock:
            self.max_bytes = max_bytes
            self._evict(keep=None)

    def purge(self, match: Callable[[tuple], bool]) -> int:
        """Remove every entry whose key matches; fills in progress for it are not kept."""
        with self._lock:
            victims = [e for k, e in self._index.items() if match(k)]
            for entry in victims:
                self._drop(entry)
            for key, fill in self._fills.items():
                if match(key):
                    fill.discard = True
        return len(victims)

    def purge_url(self, host: str, path: str) -> int:
        """The object and all its image variants."""
        return self.purge(lambda k: k[0] == host and k[1] == path)

    def purge_prefix(self, host: str, prefix: str) -> int:
        return self.purge(lambda k: k[0] == host and k[1].startswith(prefix))

    def purge_all(self) -> int:
        return self.purge(lambda k: True)

    # -- reporting ------------------------------------------------------------

    def state(self, key: tuple) -> dict:
        """What probe shows: cached or not, age, size, seconds left."""
        now = self.clock()
        with self._lock:
            entry = self._index.get(key)
            if entry is None or entry.expires_at <= now:
                return {"cached": False, "age": None, "size": None, "expires_in": None}
            return {"cached": True, "age": int(now - entry.stored_at), "size": entry.size,
                    "expires_in": int(entry.expires_at - now)}

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._index), "bytes": self.total,
                    "max_bytes": self.max_bytes, "filling": len(self._fills)}


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
