"""One public worker process: `python -m contentnode.public_worker`, started by the daemon.

contentnode/workers.py (the daemon's side) says what workers are for and what
holds across them. This is the worker's side: the setup arrives as JSON on
stdin (configuration, slot, the inherited listening socket and counts pipe),
it builds the same App with its slot and serves only the public port until
SIGTERM (drain, then stop), SIGUSR1 (stop now) or until the daemon is gone.
"""

import ctypes
import errno
import json
import logging
import os
import signal
import socket
import sys
import threading
import time

from contentnode import oscalls
from contentnode.app import build_app
from contentnode.clock import Clock
from contentnode.config import Config
from contentnode.daemon import setup_logging
from contentnode.store import STATE_FILE
from contentnode.workers import COUNTS_EVERY, STATE_POLL_SECONDS, STOP_GRACE_SECONDS, STOP_NOW

log = logging.getLogger("contentnode.workers")

PR_SET_PDEATHSIG = 1


def run(setup: dict) -> int:
    """The worker's whole life: serve the inherited public socket until SIGTERM."""
    config = Config(setup["config"], {name: "daemon" for name in setup["config"]})
    slot = setup["slot"]
    setup_logging(config.log_level)
    stop, hurry = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(STOP_NOW, lambda *_: (hurry.set(), stop.set()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the daemon, which stops us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the access log is open (it is opened after any rename)
    _die_with_daemon(setup["daemon_pid"])
    counts = os.fdopen(setup["counts_fd"], "wb")
    listener = socket.socket(fileno=setup["listener_fd"])
    # Every worker waits for the same socket: when another took the connection, a blocking accept()
    # would wait for the next one, and a stop would wait with it (till SIGKILL).
    listener.setblocking(False)
    stamp = _state_stamp(os.path.join(config.data_dir, STATE_FILE))  # before the load: a write in between is seen
    app = build_app(config, Clock.from_environment(), worker_slot=slot)
    server = app.serve_public_socket(listener)
    signal.signal(signal.SIGHUP, lambda *_: app.access_log.reopen())
    log.info("public worker %d serving (slot %d)", os.getpid(), slot)
    while not stop.wait(min(STATE_POLL_SECONDS, COUNTS_EVERY)):
        if os.getppid() != setup["daemon_pid"]:
            break
        stamp = _follow_state(app, stamp)
        _send_counts(app, counts)
    _drain(app, setup["daemon_pid"], hurry, counts)
    server.close_gracefully(grace=STOP_GRACE_SECONDS - 1)
    _send_counts(app, counts)
    counts.close()
    return 0


def _drain(app, daemon_pid: int, hurry: threading.Event, counts) -> None:
    """As the daemon does: /healthz answers 503 for drain_seconds while requests are served."""
    if hurry.is_set() or os.getppid() != daemon_pid:
        return
    app.drain()
    deadline = time.monotonic() + app.config.drain_seconds
    while not hurry.wait(min(COUNTS_EVERY, max(0.0, deadline - time.monotonic()))):
        _send_counts(app, counts)
        if time.monotonic() >= deadline or os.getppid() != daemon_pid:
            return


def _follow_state(app, stamp):
    """Re-read the state file when the daemon wrote a new one."""
    now = _state_stamp(app.store.path)
    if now is not None and now != stamp:
        try:
            app.store.load()
        except Exception:
            log.exception("public worker %d: cannot reload the state file", os.getpid())
    return now


def _send_counts(app, counts) -> None:
    traffic = app.delivery.traffic.take_pending()
    requests = app.metrics.take_requests()
    if traffic or requests["requests"]:
        counts.write(json.dumps({"traffic": traffic, "requests": requests}).encode() + b"\n")
        counts.flush()


def _die_with_daemon(daemon_pid: int) -> None:
    """SIGTERM when the daemon dies, even by kill -9 (we would serve stale state)."""
    without = f"a public worker stops within {STATE_POLL_SECONDS:.2f} s of the daemon instead"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
            oscalls.note_refused("prctl(PR_SET_PDEATHSIG)", ctypes.get_errno(), without)
    except (OSError, AttributeError):  # no libc to load, or no prctl in it (not Linux)
        oscalls.note_refused("prctl(PR_SET_PDEATHSIG)", errno.ENOSYS, without)
    if os.getppid() != daemon_pid:  # gone before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _state_stamp(path: str):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_ino


if __name__ == "__main__":
    sys.exit(run(json.loads(sys.stdin.buffer.read())))
