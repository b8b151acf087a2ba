"""A background job that runs a function every so many seconds, from start() to stop().

Every background job of the daemon is an object with start() and stop(), listed
once, in order, in app.py (App.jobs): App.start starts them in that order and
App.stop stops them in the reverse one. Most are an Every; the notifier, the
update check and the fleet have loops of their own behind the same two calls.
"""

import logging
import threading

log = logging.getLogger("contentnode")


class Every:
    """fn() every `seconds` on a daemon thread of its own; `at_start` runs it once right away too.

    A failing run is logged and the next one comes on time. stop() ends the waiting
    (a run in progress finishes on its own thread), then runs `at_stop` once.
    """

    def __init__(self, name: str, seconds: float, fn, at_start: bool = False, at_stop=None):
        self.name, self.seconds, self.fn = name, seconds, fn
        self.at_start, self.at_stop = at_start, at_stop
        self._stopping = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"job-{self.name}", daemon=True).start()

    def _loop(self) -> None:
        if self.at_start:
            self._run()
        while not self._stopping.wait(self.seconds):
            self._run()

    def _run(self) -> None:
        try:
            self.fn()
        except Exception:
            log.exception("background job %s failed", self.name)

    def stop(self) -> None:
        self._stopping.set()
        if self.at_stop is not None:
            self.at_stop()
