"""The threads that run the cache's fills, kept and reused.

Every answer the cache stores is copied into it on a thread of its own
(core/cache_fills.py; the origin request itself runs in the thread of the
request that started the fill), and starting a thread costs more than the
rest of a small fill: the new thread is made, scheduled, and its starter
waits until it runs. So a fill's thread, once its fill is done, waits
IDLE_SECONDS for the next fill before it ends.
There is no cap here: a fill never waits for another one to finish (a slow
origin holds only its own), and what bounds the fills in flight bounds
these threads (each fill has a request waiting on it, or is one of the
shared cache's bounded background refreshes).
"""

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("contentnode.cache")

IDLE_SECONDS = 30.0


class FillThreads:
    """Run fn(*args) on an idle kept thread, or on a new one when none is idle."""

    def __init__(self, name: str = "cache-fill"):
        self._name = name
        self._idle: list[queue.SimpleQueue] = []   # each idle thread's inbox
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """At the cache's close: idle threads end now, busy ones when their fill is done."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def run(self, fn: Callable, *args) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=self._name, daemon=True).start()
        inbox.put((fn, args))

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            try:
                task = inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:    # no work was handed meanwhile: end
                        self._idle.remove(inbox)
                        return
                continue                       # handed work just as it timed out: take it
            if task is None:                   # closed
                return
            fn, args = task
            try:
                fn(*args)
            except Exception:   # noqa: BLE001 - the thread stays usable; what failed is logged
                log.exception("a %s task failed", self._name)
            with self._lock:
                if self._closed:
                    return
                self._idle.append(inbox)
