"""Public worker processes: N processes serve the public port the daemon bound.

The daemon binds the public socket once (a busy port fails at start, in the
daemon, with its usual message), serves the admin API and HTTPS itself, and
starts N workers with `python -m contentnode.public_worker`. Each worker is a fresh
interpreter, not a fork of the threaded daemon, so it inherits no lock some
daemon thread held; it gets the listening socket and a pipe as inherited file
descriptors and its configuration as JSON on stdin, builds the same App
(build_app with its slot) and serves only the public side:

- configuration: before every request it re-reads the state file when the
  file's inode changed (Store.follow), so a change the admin API acknowledged
  is served by every worker from the very next request;
- cache: shared with the daemon and the other workers through the cache's
  ledger (core/cache_ledger.py): one budget, purges reach every worker's
  memory, one origin GET per key across processes;
- counters: every COUNTS_EVERY it sends what it counted (traffic rows, request
  counts and latencies, the tail's new entries; the top summaries in lines of
  their own) up the pipe as JSON lines, and once more when it stops; the
  daemon adds them to its own, so /api/traffic, /api/traffic/top and /tail
  and /metrics sum over every process.

A worker that dies is logged and started again (its cache temp files dropped
and the cache's books recounted first; one that dies within a second of starting is started
again only after a pause that doubles up to RESTART_PAUSE_MAX). SIGTERM to
the daemon is passed on at once: each worker drains as the daemon does (its
/healthz answers 503 for drain_seconds while it serves on), then finishes its
in-flight requests; SIGUSR1 (the daemon's SIGINT or second SIGTERM) skips the
drain; after the drain and STOP_GRACE_SECONDS, SIGKILL. SIGHUP is passed on
too (the access log file is reopened). A worker also stops when the daemon is
gone, whatever it died of: the daemon keeps each worker's stdin open as its
lifeline, and the worker stops (ending itself after STOP_GRACE_SECONDS at the
latest) when it reads EOF there.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO, cast

log = logging.getLogger("contentnode.workers")

COUNTS_EVERY = 0.25           # how often a worker sends its counts
STOP_GRACE_SECONDS = 10.0
RESTART_PAUSE_MAX = 30.0
STOP_NOW = signal.SIGUSR1      # to a worker: stop without draining
MAX_COUNTS_LINE = 4 << 20      # a counts line is far smaller (bounded labels); a longer one is dropped


class _Worker:
    """The daemon's handle on one worker: its process and the reader of its counts pipe.

    The process's stdin stays open as its lifeline: the worker stops when it reads EOF.
    """

    def __init__(self, process: subprocess.Popen, reader: threading.Thread):
        self.process, self.reader = process, reader
        self.started = time.monotonic()


class PublicWorkers:
    """Starts, watches and stops the public worker processes of the daemon's App."""

    def __init__(self, app, count: int):
        self.app = app
        self.count = count
        self.workers: dict[int, _Worker] = {}   # slot -> worker
        self._stopping = threading.Event()
        self._pause = 0.0
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        for slot in range(1, self.count + 1):
            self._spawn(slot)
        self._watcher = threading.Thread(target=self._watch, name="public-workers", daemon=True)
        self._watcher.start()

    def begin_stop(self, hurry: threading.Event) -> None:
        """No more restarts; SIGTERM (drain, then stop) or SIGUSR1 (stop now) to every worker."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join()
        self.signal_all(STOP_NOW if hurry.is_set() else signal.SIGTERM)

    def stop(self, hurry: threading.Event) -> None:
        """Wait for every worker (bounded: the drain and STOP_GRACE_SECONDS), SIGKILL the rest,
        take in their last counts."""
        self.begin_stop(hurry)
        if hurry.is_set():
            self.signal_all(STOP_NOW)
        grace = STOP_GRACE_SECONDS + (0 if hurry.is_set() else self.app.config.drain_seconds)
        deadline = time.monotonic() + grace
        for worker in self.workers.values():
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("public worker %d did not stop in %.0f s: killed", worker.process.pid, grace)
                worker.process.kill()
                worker.process.wait()
            _close(worker.process.stdin)
            worker.reader.join(timeout=2.0)

    def signal_all(self, signum: int) -> None:
        for worker in list(self.workers.values()):
            _signal(worker.process, signum)

    def _spawn(self, slot: int) -> None:
        listener = self.app.listeners.servers["public"].socket
        counts_read, counts_write = os.pipe()
        config = self.app.config.values()
        config["admin_port"] = self.app.listeners.servers["admin"].server_address[1]  # the bound ones, not 0
        config["public_port"] = listener.getsockname()[1]
        setup = {"config": config, "slot": slot, "listener_fd": listener.fileno(),
                 "counts_fd": counts_write, "daemon_pid": os.getpid()}
        try:
            process = subprocess.Popen([sys.executable, "-m", "contentnode.public_worker"], stdin=subprocess.PIPE,
                                       pass_fds=(listener.fileno(), counts_write))
        finally:
            os.close(counts_write)
        lifeline = cast(IO[bytes], process.stdin)   # stdin=PIPE: never None
        lifeline.write(json.dumps(setup).encode() + b"\n")
        lifeline.flush()   # and kept open: the worker's lifeline (see public_worker.py)
        counts = os.fdopen(counts_read, "rb")
        reader = threading.Thread(target=self._read_counts, args=(counts,), name=f"worker-{slot}-counts",
                                  daemon=True)
        reader.start()
        self.workers[slot] = _Worker(process, reader)
        log.info("public worker %d started (slot %d)", process.pid, slot)

    def _read_counts(self, counts) -> None:
        """Add one worker's counts to the daemon's, line by line, until its pipe closes."""
        delivery, metrics = self.app.delivery, self.app.metrics
        with counts:
            for line in iter(lambda: counts.readline(MAX_COUNTS_LINE), b""):
                try:
                    message = json.loads(line)
                    if "top" in message:
                        self.app.traffic_top.merge_pending(message["top"])
                        continue
                    delivery.traffic.merge_pending(message["traffic"])
                    metrics.merge_requests(message["requests"])
                    self.app.traffic_tail.merge_pending(message.get("tail", []))
                except Exception:  # this reader must live on: a full pipe would stall the worker
                    log.exception("ignored a counts line from a public worker")

    def _watch(self) -> None:
        while not self._stopping.wait(0.25):
            for slot, worker in list(self.workers.items()):
                status = worker.process.poll()
                if status is None:
                    continue
                worker.reader.join(timeout=2.0)  # its last counts first
                _close(worker.process.stdin)
                self.app.delivery.cache.settle()  # its temp files go; the books are recounted
                quick = time.monotonic() - worker.started < 1.0
                self._pause = min(max(self._pause * 2, 0.5), RESTART_PAUSE_MAX) if quick else 0.0
                log.warning("public worker %d (slot %d) exited (%s): restarting%s", worker.process.pid, slot,
                            _describe(status), f" in {self._pause:.1f} s" if self._pause else "")
                if self._stopping.wait(self._pause):
                    return
                self._spawn(slot)


def _signal(process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


def _close(stream) -> None:
    try:
        stream.close()
    except OSError:   # a worker that is already gone: nothing to tell it
        pass


def _describe(status: int) -> str:
    return f"signal {-status}" if status < 0 else f"status {status}"
