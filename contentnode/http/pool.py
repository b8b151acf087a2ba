"""The public listeners' bounded pool of threads (http/parking.py).

A connection gets a thread only when it has a request that may wait; the
pool starts a thread when work waits and none is free, up to `size`
(`public_threads`), so the threads are bounded by the pool, never by the
connections, and an idle node holds none.
"""

import queue
import threading


class Pool:
    """Up to `size` threads, started when work waits and none is free; one queue."""

    def __init__(self, size: int, work, name: str):
        self._size, self._work, self._name = size, work, name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._free = 0

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, item) -> None:
        self._queue.put(item)
        with self._lock:
            start = self._free < self._queue.qsize() and self._threads < self._size
            if start:
                self._threads += 1
        if start:
            threading.Thread(target=self._run, name=f"{self._name}-pool", daemon=True).start()

    def stop(self) -> None:
        for _ in range(self._threads):
            self._queue.put(None)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._free += 1
            item = self._queue.get()
            with self._lock:
                self._free -= 1
            if item is None:
                return
            self._work(item)
