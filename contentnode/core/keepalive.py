"""Kept-alive outbound connections: a few idle ones per origin, reused by the next call.

A content miss used to open (and over https, handshake) a new connection to the
bucket's server for every object. A pool keeps the connections a finished
answer left idle and hands them to the next call: at most `size` of them, each
for at most `idle_seconds` (servers drop idle connections themselves). One
that the server closed meanwhile fails its next request before any answer;
the caller then tries once more on a new connection (core/s3.py). Pools are
thread-safe: many misses of one bucket run at once, each on its own connection.
"""

import threading
import time
from typing import Any

IDLE_CONNECTIONS = 8      # idle connections kept per pool; more at once are opened and closed as before
IDLE_SECONDS = 30.0       # an idle connection older than this is closed, never reused


class ConnectionPool:
    """Idle http.client connections (core/netguard.py's), each under the (scheme, host, port) it reaches."""

    def __init__(self, size: int = IDLE_CONNECTIONS, idle_seconds: float = IDLE_SECONDS,
                 clock=time.monotonic):
        self.size, self.idle_seconds, self._clock = size, idle_seconds, clock
        self._idle: list[tuple[tuple, Any, float]] = []   # (where, conn, idle since), newest last
        self._lock = threading.Lock()
        self._closed = False

    def take(self, where: tuple):
        """The most recently idled connection to `where`, or None: the caller opens one."""
        expired: list[tuple[tuple, Any, float]] = []
        keep: list[tuple[tuple, Any, float]] = []
        found = None
        with self._lock:
            oldest = self._clock() - self.idle_seconds
            for entry in self._idle:
                (expired if entry[2] < oldest else keep).append(entry)
            for index in range(len(keep) - 1, -1, -1):
                if keep[index][0] == where:
                    found = keep.pop(index)[1]
                    break
            self._idle = keep
        for entry in expired:
            entry[1].close()
        return found

    def give(self, where: tuple, conn) -> None:
        """Keep a connection whose last answer was read to its end; closed when the pool is full or shut."""
        conn.set_deadline(None)   # an idle connection is never cut by the last call's deadline
        with self._lock:
            if not self._closed and len(self._idle) < self.size:
                self._idle.append((where, conn, self._clock()))
                return
        conn.close()

    def close(self) -> None:
        """Close every idle connection; connections given back later are closed too."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for entry in idle:
            entry[1].close()
