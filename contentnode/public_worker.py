"""One public worker process: `python -m contentnode.public_worker`, started by the daemon.

contentnode/workers.py (the daemon's side) says what workers are for and what
holds across them. This is the worker's side: the setup arrives as JSON on
stdin (configuration, slot, the inherited listening socket and counts pipe),
it builds the same App with its slot and serves only the public port until
SIGTERM or until the daemon is gone.
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

from contentnode import oscalls
from contentnode.app import build_app
from contentnode.clock import Clock
from contentnode.config import Config
from contentnode.daemon import setup_logging
from contentnode.store import STATE_FILE
from contentnode.workers import COUNTS_EVERY, STATE_POLL_SECONDS, STOP_GRACE_SECONDS

log = logging.getLogger("contentnode.workers")

PR_SET_PDEATHSIG = 1


def run(setup: dict) -> int:
    """The worker's whole life: serve the inherited public socket until SIGTERM."""
    config = Config(setup["config"], {name: "daemon" for name in setup["config"]})
    slot = setup["slot"]
    setup_logging(config.log_level)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the daemon, which stops us
    _die_with_daemon(setup["daemon_pid"])
    counts = os.fdopen(setup["counts_fd"], "wb")
    listener = socket.socket(fileno=setup["listener_fd"])
    stamp = _state_stamp(os.path.join(config.data_dir, STATE_FILE))  # before the load: a write in between is seen
    app = build_app(config, Clock.from_environment(), worker_slot=slot)
    server = app.serve_public_socket(listener)
    log.info("public worker %d serving (slot %d)", os.getpid(), slot)
    while not stop.wait(min(STATE_POLL_SECONDS, COUNTS_EVERY)):
        if os.getppid() != setup["daemon_pid"]:
            break
        stamp = _follow_state(app, stamp)
        _send_counts(app, counts)
    server.close_gracefully(grace=STOP_GRACE_SECONDS - 1)
    _send_counts(app, counts)
    counts.close()
    return 0


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
