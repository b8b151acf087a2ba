"""The cache's entries on disk: one file per key, a small JSON header, the body, then heads.

The file is named by SHA-256 digests of the object (host, path) and of the
whole key (with the image variant, and room for more parts such as an
encoding), and lives in a folder named by the name's first two hex digits; the header holds
the key, size, meta, times and a random id, so a file alone says what it is,
whether it is whole, and whether it is still the very entry a process indexed
(inode numbers are reused, so they cannot say that). core/cache.py indexes
these files and core/cache_purge.py removes them; nothing else reads them.

A 304 that refreshes a stored answer appends a head record after the body
(magic, length, CRC-32, then JSON: meta and times) instead of copying the
body: the last whole record is the entry's head, and a torn one (a death
mid-append) is ignored, so the head before it stands. A file takes at most
MAX_HEADS records in MAX_HEADS_BYTES; past either a refresh writes a new file.
A build that knows no records sees a file longer than its header says: torn,
so it never serves a head it cannot read.

A file's mtime is the time of its last use (set at the store and refreshed by
hits, at most once a minute, in the cache clock's time): LruOrder picks the
least recently used file of the whole folder, whatever process stored it.
"""

import hashlib
import heapq
import itertools
import json
import os
import struct
import zlib
from dataclasses import dataclass, field

from contentnode.fileio import ensure_private_dir

MAGIC = b"CNC1"
_PREFIX = struct.Struct(">4sI")
MAX_HEADER = 64 * 1024
HEAD_MAGIC = b"CNH1"
_HEAD_PREFIX = struct.Struct(">4sII")   # magic, length, CRC-32 of the JSON that follows
MAX_HEADS = 8                  # head records appended to one file before a refresh rewrites it
MAX_HEADS_BYTES = 16 * 1024    # their bytes in all (prefixes included): the most a file grows by refreshes


@dataclass
class Entry:
    key: tuple            # (host, path, image variant[, more: an encoding, later]); purges match host and path
    path: str             # file on disk
    offset: int           # where the body starts in the file
    size: int             # body length
    meta: dict
    stored_at: float
    expires_at: float
    touched: float = 0.0
    body: bytes | None = None   # the body in memory, for a small entry that was hit (cache.HOT_MAX_BYTES)
    uid: str = ""         # the random id in the header: another process may replace the file at this path
    head: int = 0         # head records appended after the body (refreshes); the last one is this entry's
    used: float = 0.0     # this process's last use of the entry (cache clock) ...
    tick: int = 0         # ... and its rank among this process's uses: LruOrder's finer order
    memo: object = field(default=None, compare=False, repr=False)   # what the shared cache parsed once from meta for its hits (core/shared_hit.py)

    def last_use(self) -> tuple[int, int]:
        return int(self.used * 1e9), self.tick

    @property
    def version(self) -> tuple[str, int]:
        """What tells this stored answer from another: its file's id and its head's number (a
        refreshed head keeps the body, and so the id, that compressed variants are made from)."""
        return self.uid, self.head


OBJECT_NAME_DIGITS = 32   # an object's name: the first half of each of its entries' file names


def object_name(host: str, path: str) -> str:
    """The first half of the file name of every entry of one object (its variants, encodings)."""
    return _digest(f"{host}\0{path}")[:OBJECT_NAME_DIGITS]


def key_name(key: tuple) -> str:
    """An entry's file name: its object's half, then the whole key's. The folder is named by the
    first two digits, so a URL purge lists one folder and matches one prefix."""
    return object_name(key[0], key[1]) + _digest("\0".join(key))[:32]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def header_bytes(header: dict, width: int = 0) -> bytes:
    """The header's bytes; `width` pads them with spaces (which JSON ignores) to that length, so
    a header rewritten in place once the body's size is known keeps the body's offset."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * max(0, width - _PREFIX.size - len(raw))
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


def head_record(head: dict) -> bytes:
    """A head record's bytes: `head` holds meta, stored_at and expires_at."""
    raw = json.dumps(head, separators=(",", ":")).encode()
    return _HEAD_PREFIX.pack(HEAD_MAGIC, len(raw), zlib.crc32(raw)) + raw


def read_heads(fd: int, body_end: int, file_size: int) -> tuple[dict | None, int, int]:
    """(the last whole head record or None, how many whole ones, where they end) of an entry file
    whose body ends at body_end: records are read in order up to the first torn or foreign one."""
    tail = os.pread(fd, min(file_size - body_end, MAX_HEADS_BYTES), body_end) if file_size > body_end else b""
    last, count, pos = None, 0, 0
    while pos + _HEAD_PREFIX.size <= len(tail):
        magic, length, crc = _HEAD_PREFIX.unpack_from(tail, pos)
        end = pos + _HEAD_PREFIX.size + length
        raw = tail[pos + _HEAD_PREFIX.size:end]
        if magic != HEAD_MAGIC or end > len(tail) or zlib.crc32(raw) != crc:
            break
        try:
            head = json.loads(raw)
            if not isinstance(head["meta"], dict):
                break
            float(head["stored_at"]), float(head["expires_at"])
        except (ValueError, KeyError, TypeError):
            break
        last, count, pos = head, count + 1, end
    return last, count, body_end + pos


def temp_name(pid: int, name: str) -> str:
    """A fill's temp file name in the cache's tmp folder: its process, its key's name, a random
    part. Its process tells a dead one's leftovers (core/cache_books.py); its key's name, which
    begins with its object's, tells a fill of an object in flight (core/cache_purge.py)."""
    return f"{pid}-{name}.{os.urandom(6).hex()}"


def temp_parts(name: str) -> tuple[str, str]:
    """(the process id as written, the rest from the key's name on) of a temp file's name."""
    pid, _, rest = name.partition("-")
    return pid, rest


def new_uid() -> str:
    return os.urandom(8).hex()


# Entries written before ids and object-first names (contentnode 0.1): named by the SHA-256 of
# the whole key, no "id" in the header. They are adopted at start (renamed to today's name) so an
# upgrade keeps the cache; every file written since carries a random id, never this one.
LEGACY_UID = ""


def _whole_file(path: str):
    """(header, key, body offset, stat) of a whole entry file at path, the header's meta and times
    those of its last whole head record, and "heads" their count; None when it is gone, torn
    (shorter than its header says) or not an entry."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        header, offset = read_header(fd)
        st = os.fstat(fd)
        key = tuple(header["key"])
        body_end = offset + header["size"]
        if len(key) < 3 or not all(isinstance(part, str) for part in key) or st.st_size < body_end:
            return None
        head, header["heads"], _end = read_heads(fd, body_end, st.st_size)
        if head is not None:
            header.update(meta=head["meta"], stored_at=head["stored_at"], expires_at=head["expires_at"])
        return header, key, offset, st
    except (ValueError, KeyError, TypeError, OSError):
        return None
    finally:
        os.close(fd)


def read_entry(path: str, name: str) -> Entry | None:
    """The entry in the file at path (named `name`), or None when it is gone, torn or foreign."""
    found = _whole_file(path)
    if found is None or key_name(found[1]) != name:
        return None
    header, key, offset, st = found
    try:
        return Entry(key, path, offset, header["size"], header["meta"], header["stored_at"],
                     header["expires_at"], st.st_mtime, uid=header.get("id", LEGACY_UID), head=header["heads"])
    except (KeyError, AttributeError):
        return None


def header_uid(fd: int) -> str | None:
    """The id in the header of an open entry file, None when it is not one."""
    try:
        return read_header(fd)[0].get("id", LEGACY_UID)
    except (ValueError, OSError):
        return None


def adopt_legacy(root: str, path: str, name: str) -> str | None:
    """Rename a whole 0.1 entry file to its name of today; its new path, or None when it is not one."""
    found = _whole_file(path)
    if found is None:
        return None
    header, key, offset, st = found
    if "id" in header or st.st_size != offset + header["size"] or len(key) != 3 or name != _digest("\0".join(key)):
        return None
    new_name = key_name(key)
    folder = os.path.join(root, new_name[:2])
    ensure_private_dir(folder)
    target = os.path.join(folder, new_name)
    os.rename(path, target)
    return target


class LruOrder:
    """The entry files of a cache folder, least recently used first, for eviction.

    A heap of (mtime ns, tick, seq, path, entry): built from one walk of the
    folder, fed with this process's new entries, and walked again once every
    file older than the last walk is gone (then the files other processes
    stored since compete with this process's own). A file used since it was
    queued (its mtime moved, or this process's entry was hit) goes back in
    with its newer time, so the victim is the file least recently used by any
    process, within TOUCH_EVERY, and exactly among this process's own hits.
    Callers hold the cache lock.
    """

    def __init__(self, root: str):
        self.root = root
        self._heap: list = []
        self._seq = itertools.count()
        self._walked_ns = -1     # (cache clock) when the folder was last walked; -1: never

    def push(self, used: tuple, path: str, entry: Entry | None = None, bound: int | None = None) -> None:
        """Queue a file; past `bound` items (files found again and again) the queue is dropped,
        to be walked afresh when a victim is next asked for."""
        if bound is not None and len(self._heap) >= bound:
            self._heap, self._walked_ns = [], -1
            return
        heapq.heappush(self._heap, (used[0], used[1], next(self._seq), path, entry))

    def stale(self) -> bool:
        """Whether the next victim needs a walk of the folder (read without the lock: a hint)."""
        heap = self._heap
        return not heap or heap[0][0] > self._walked_ns

    def walk(self) -> list[tuple[int, str, str]]:
        """(mtime ns, path, name) of every entry file: no lock needed, so a fill walks before it
        takes the cache's locks, and hits go on meanwhile."""
        found = []
        for path, name in entry_paths(self.root):
            try:
                found.append((os.stat(path).st_mtime_ns, path, name))
            except FileNotFoundError:
                continue
        return found

    def rebuild(self, known: dict, now_ns: int, walked: list | None = None) -> None:
        """The queue from a walk of the folder (made now unless given); `known` maps file names
        to this process's entries."""
        walked = self.walk() if walked is None else walked
        self._heap = [(mtime, 0, next(self._seq), path, known.get(name)) for mtime, path, name in walked]
        heapq.heapify(self._heap)
        # every file walked counts as walked, even one dated after now (a clock set back)
        self._walked_ns = max(now_ns, max((item[0] for item in self._heap), default=now_ns))

    def victim(self, current, known, now_ns: int) -> tuple[str, os.stat_result, Entry | None] | None:
        """The least recently used file (path, stat, this process's entry or None), or None when
        the folder holds none. `current(entry)` says whether an entry is still indexed."""
        walked = False
        while True:
            if not walked and self.stale():
                self.rebuild(known(), now_ns)
                walked = True
            if not self._heap:
                return None
            ns, tick, _, path, entry = heapq.heappop(self._heap)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if entry is not None and not current(entry):
                entry = None
            newest = max((st.st_mtime_ns, 0), entry.last_use() if entry is not None else (0, 0))
            if newest > (ns, tick):
                self.push(newest, path, entry)
                continue
            return path, st, entry

    def __len__(self) -> int:
        return len(self._heap)


def entry_paths(root: str, objects: list[str] | None = None):
    """(path, name) of every file in the cache's two-hex-digit folders; with `objects` (object
    names), only the files of those objects."""
    if objects is None:
        folders = [sub for sub in os.listdir(root) if len(sub) == 2]
    else:
        folders = sorted({name[:2] for name in objects})
    wanted = None if objects is None else tuple(objects)
    for sub in folders:
        folder = os.path.join(root, sub)
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if wanted is None or name.startswith(wanted):
                yield os.path.join(folder, name), name


def file_size(path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def remove_if_present(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
