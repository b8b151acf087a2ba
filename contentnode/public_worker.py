"""One public worker process: `python -m contentnode.public_worker`, started by the daemon.

contentnode/workers.py (the daemon's side) says what workers are for and what
holds across them. This is the worker's side: the setup arrives as JSON on
stdin (configuration, slot, the inherited listening socket and counts pipe),
it builds the same App with its slot and serves only the public port until
SIGTERM (drain, then stop), SIGUSR1 (stop now) or until the daemon is gone
(its stdin, which the daemon keeps open, reaches EOF: stop now).
"""

import json
import logging
import os
import signal
import socket
import sys
import threading
import time

from contentnode.app import build_app
from contentnode.clock import Clock
from contentnode.config import Config
from contentnode.daemon import settle_memory, setup_logging
from contentnode.workers import COUNTS_EVERY, STOP_GRACE_SECONDS, STOP_NOW

log = logging.getLogger("contentnode.workers")


def run(setup: dict, lifeline) -> int:
    """The worker's whole life: serve the inherited public socket until told to stop or the daemon is gone."""
    config = Config(setup["config"], {name: "daemon" for name in setup["config"]})
    slot = setup["slot"]
    setup_logging(config.log_level)
    stop, hurry = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    def stop_now(*_):
        hurry.set()
        stop.set()

    signal.signal(STOP_NOW, stop_now)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the daemon, which stops us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the access log is open (it is opened after any rename)
    threading.Thread(target=_watch_lifeline, args=(lifeline, stop, hurry), name="lifeline", daemon=True).start()
    counts = os.fdopen(setup["counts_fd"], "wb")
    listener = socket.socket(fileno=setup["listener_fd"])
    app = build_app(config, Clock.from_environment(), worker_slot=slot)
    server = app.serve_public_socket(listener)
    settle_memory()
    signal.signal(signal.SIGHUP, lambda *_: app.access_log.reopen())
    log.info("public worker %d serving (slot %d)", os.getpid(), slot)
    try:
        while not stop.wait(COUNTS_EVERY):
            app.store.follow()   # requests do this too; an idle worker keeps up as well
            _send_counts(app, counts)
        _drain(app, hurry, counts)
    finally:
        server.close_gracefully(grace=STOP_GRACE_SECONDS - 1)
    _send_counts(app, counts)
    counts.close()
    return 0


def _drain(app, hurry: threading.Event, counts) -> None:
    """As the daemon does: /healthz answers 503 for drain_seconds while requests are served."""
    if hurry.is_set():
        return
    app.drain()
    deadline = time.monotonic() + app.config.drain_seconds
    while not hurry.wait(min(COUNTS_EVERY, max(0.0, deadline - time.monotonic()))):
        _send_counts(app, counts)
        if time.monotonic() >= deadline:
            return


def _watch_lifeline(lifeline, stop: threading.Event, hurry: threading.Event) -> None:
    """Stop now (no drain) when the daemon is gone, whatever it died of.

    The daemon holds the write end of our stdin and never closes it while it
    wants us: its death (kill -9, a crash) closes it and we read EOF. Unlike
    PR_SET_PDEATHSIG this does not depend on which daemon thread started us,
    nor on a signal we might be ignoring. Stop in an orderly way, and if that
    does not end the process within the grace, end it here.
    """
    while lifeline.read(4096):
        pass
    if not stop.is_set():
        log.warning("public worker %d: the daemon is gone; stopping", os.getpid())
    hurry.set()
    stop.set()
    threading.Event().wait(STOP_GRACE_SECONDS)
    log.error("public worker %d did not stop in %.0f s after the daemon went: exiting", os.getpid(),
              STOP_GRACE_SECONDS)
    os._exit(1)


def _send_counts(app, counts) -> None:
    """The counters and the tail in one line; each domain's and minute's top summaries in a line of
    their own (a line stays far below MAX_COUNTS_LINE whatever the number of domains)."""
    traffic = app.delivery.traffic.take_pending()
    requests = app.metrics.take_requests()
    tail = app.traffic_tail.take_pending()
    top = app.traffic_top.take_pending()
    if traffic or requests["requests"] or tail:
        counts.write(json.dumps({"traffic": traffic, "requests": requests, "tail": tail}).encode() + b"\n")
    for row in top:
        counts.write(json.dumps({"top": [row]}).encode() + b"\n")
    counts.flush()


def main() -> None:
    """Run, then leave at once: a thread nobody stopped must not keep the process (and its port) alive."""
    lifeline = sys.stdin.buffer
    status = 1
    try:
        status = run(json.loads(lifeline.readline()), lifeline)
    except BrokenPipeError:   # the counts pipe: the daemon is gone
        status = 0
    except Exception:
        log.exception("public worker %d failed", os.getpid())
    finally:
        logging.shutdown()
        os._exit(status)


if __name__ == "__main__":
    main()
