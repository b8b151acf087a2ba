"""The cache's entries on disk: one file per key, a small JSON header, then the body.

The file is named by the SHA-256 of the key (host, path, image variant) and
lives in a folder named by the name's first two hex digits; the header holds
the key, size, meta and times, so a file alone says what it is and whether it
is whole. core/cache.py indexes these files; nothing else reads them.
"""

import hashlib
import json
import os
import struct
from dataclasses import dataclass

MAGIC = b"CNC1"
_PREFIX = struct.Struct(">4sI")
MAX_HEADER = 64 * 1024


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
    body: bytes | None = None   # the body in memory, for a small entry that was hit (cache.HOT_MAX_BYTES)
    inode: int = 0        # the file's inode: another process may replace the file at this path

    @property
    def file_size(self) -> int:
        return self.offset + self.size


def key_name(key: tuple) -> str:
    return hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass")).hexdigest()


def header_bytes(header: dict) -> bytes:
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


def entry_paths(root: str):
    """(path, name) of every file in the cache's two-hex-digit folders."""
    for sub in os.listdir(root):
        folder = os.path.join(root, sub)
        if len(sub) == 2 and os.path.isdir(folder):
            for name in os.listdir(folder):
                yield os.path.join(folder, name), name
