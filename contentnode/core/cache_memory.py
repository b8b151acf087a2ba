"""What one process keeps in memory between cache hits: small bodies, and open files of large ones.

A hit on a body of at most HOT_MAX_OBJECT bytes is answered from memory after
its first hit (HotBodies: HOT_MAX_BYTES in all, oldest first out), costing no
open, sendfile or close; a larger entry's file stays open between hits
(OpenFiles: at most OPEN_FILES, the least recently hit closed first), one
descriptor shared by the hits sending it. core/cache.py decides what is kept
and calls these with its lock held.
"""

import os
from collections import OrderedDict, deque

from contentnode.core.cache_entries import Entry
from contentnode.core.cache_fill import SharedFile

HOT_MAX_OBJECT = 64 * 1024          # bodies up to this size are kept in memory after a hit
HOT_MAX_BYTES = 16 * 1024 * 1024    # the memory all those bodies may hold together
OPEN_FILES = 64                     # larger entries' files kept open between hits (most recent)


class HotBodies:
    """Entries holding their body in memory, oldest first."""

    def __init__(self) -> None:
        self._entries: deque = deque()
        self.bytes = 0

    def keep(self, entry: Entry, body: bytes) -> None:
        entry.body = body
        self._entries.append(entry)
        self.bytes += len(body)
        while self.bytes > HOT_MAX_BYTES:
            old = self._entries.popleft()
            self.bytes -= len(old.body)
            old.body = None

    def clear(self) -> None:
        for entry in self._entries:
            entry.body = None
        self._entries.clear()
        self.bytes = 0


class OpenFiles:
    """Entry key -> (entry, its shared open file), least recently hit first."""

    def __init__(self) -> None:
        self._files: OrderedDict[tuple, tuple[Entry, SharedFile]] = OrderedDict()

    def share(self, entry: Entry, open_file) -> SharedFile | None:
        """The entry's shared file, opened with `open_file(entry)` if needed (None: it is gone),
        with one more user."""
        held = self._files.get(entry.key)
        if held is not None and held[0] is entry:
            self._files.move_to_end(entry.key)
            shared = held[1]
        else:
            fd = open_file(entry)
            if fd is None:
                return None
            self.retire(entry.key)
            shared = SharedFile(fd)
            self._files[entry.key] = (entry, shared)
            while len(self._files) > OPEN_FILES:
                self.retire(next(iter(self._files)))
        shared.users += 1
        return shared

    def retire(self, key, entry: Entry | None = None) -> None:
        """Stop sharing the file of key (only if it is `entry`'s, when given), closing it now if
        no hit is sending it."""
        held = self._files.get(key)
        if held is None or entry is not None and held[0] is not entry:
            return
        del self._files[key]
        held[1].retired = True
        if held[1].users == 0:
            os.close(held[1].fd)

    @staticmethod
    def release(shared: SharedFile) -> None:
        """A hit is done sending the file."""
        shared.users -= 1
        if shared.retired and shared.users == 0:
            os.close(shared.fd)

    def unlinked(self) -> list[Entry]:
        """Entries whose kept file another process removed from disk."""
        return [entry for entry, shared in self._files.values() if os.fstat(shared.fd).st_nlink == 0]

    def retire_all(self) -> None:
        for key in list(self._files):
            self.retire(key)
