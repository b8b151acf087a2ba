"""The daemon: logging, the data-dir lock, build_app, start, wait for a signal, stop."""

import gc
import importlib.util
import ipaddress
import logging
import os
import signal
import sys
import threading
import time

from contentnode import __version__, logs, sdnotify
from contentnode.app import build_app
from contentnode.auth.passwords import return_hash_memory_to_os
from contentnode.clock import Clock
from contentnode.config import DEFAULT_FOLDER_ROOT
from contentnode.fileio import DataDirLock, remove_stale_temps
from contentnode.store import claim_data_dir
from contentnode.workers import PublicWorkers

SAME_STOP_SECONDS = 0.5   # SIGTERMs this close together are one stop request (see request_stop)
# Runtime dependencies imported where they are used, not at start (a daemon's start imports only
# what it needs: docs/DEVELOPING.md, "Tests"); argon2 is imported at start. Checked before anything.
LATE_IMPORTED = ("cryptography", "pyotp")

log = logging.getLogger("contentnode")
banner = logging.getLogger("contentnode.start")


class MissingDependency(RuntimeError):
    """A runtime dependency is not installed: restarting cannot help (exit 2)."""


def check_dependencies() -> None:
    """Fail at start, not at the first certificate or second factor, when a package is missing."""
    missing = [name for name in LATE_IMPORTED if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependency(f"missing Python package {', '.join(missing)} in {sys.prefix}: install "
                                "contentnode again (it depends on argon2-cffi, pyotp and cryptography)")


def setup_logging(level: str) -> None:
    logs.setup(level, sys.stderr)
    banner.setLevel(logging.INFO)  # the start-up banner shows whatever level is configured or stored


def print_banner(app) -> None:
    """Ports, data dir and whether setup is still open; a warning when that open setup is reachable."""
    config, admin, public = app.config, app.listeners.servers["admin"], app.listeners.servers["public"]
    setup_required = not any(u["role"] == "admin" for u in app.store.data["users"].values())
    banner.info("contentnode %s, data dir %s", __version__, config.data_dir)
    banner.info("admin API on http://%s:%d", config.admin_bind, admin.server_address[1])
    banner.info("public port on http://%s:%d", config.public_bind, public.server_address[1])
    banner.info("folder buckets serve from %s", ", ".join(config.folder_roots) or "nowhere (folder_roots is empty)")
    if app.public_processes > 1:
        banner.info("public port served by %d worker processes", config.public_workers)
    if setup_required:
        banner.info("setup required: POST /api/setup {\"username\",\"password\"} on the admin API "
                    "creates the first administrator")
        if not ipaddress.ip_address(config.admin_bind).is_loopback:
            banner.warning("the admin API listens on %s, beyond loopback, while setup is still open: "
                           "anyone who reaches it can create the first administrator; run setup now "
                           "or bind the admin API to 127.0.0.1", config.admin_bind)


def settle_memory() -> None:
    """What the start built lives as long as the process: frozen, the collections that follow and the
    one at exit skip it (they traversed some 50,000 objects each: ~50 ms of CPU at a SIGTERM's exit),
    then collection resumes (`contentnode serve` turned it off for the start: ~15 ms of CPU)."""
    gc.freeze()
    gc.enable()


def make_folder_roots(config) -> None:
    """<data dir>/sites, the default folder root, is made at start (the node owns the data dir);
    a root configured elsewhere is never created, only reported when it is missing."""
    own = os.path.join(config.data_dir, DEFAULT_FOLDER_ROOT)
    for root in config.folder_roots:
        if root == own:
            os.makedirs(root, mode=0o755, exist_ok=True)
        elif not os.path.isdir(root):
            log.warning("folder root %s is not a folder: folder buckets cannot be added there", root)


def serve(config) -> int:
    check_dependencies()
    setup_logging(config.log_level)
    return_hash_memory_to_os()
    claim_data_dir(config.data_dir)
    lock = DataDirLock(config.data_dir)
    lock.acquire()
    # after the claim: a log inside a new, empty data dir must not make it look foreign
    access_log = logs.AccessLog(config.access_log, config.access_log_rate)   # a bad path: exit 2
    if remove_stale_temps(config.data_dir):
        log.info("removed temp files left by an interrupted write")
    make_folder_roots(config)
    app = build_app(config, Clock.from_environment(), access_log=access_log)
    app.start()
    workers = PublicWorkers(app, config.public_workers) if app.public_processes > 1 else None
    if workers is not None:
        workers.start()
    print_banner(app)
    settle_memory()
    stop, hurry = threading.Event(), threading.Event()
    first_term: list = []

    def request_stop(signum, frame):
        """SIGTERM drains first (balancers see /healthz 503); SIGINT or a second SIGTERM stops at once.
        A SIGTERM within SAME_STOP_SECONDS of the first is the same request: `make run` stopped by a
        signal to its process group delivers it twice (once to the group, once forwarded by make)."""
        now = time.monotonic()
        if signum == signal.SIGINT or (stop.is_set() and first_term and now - first_term[0] >= SAME_STOP_SECONDS):
            hurry.set()
        if signum == signal.SIGTERM and not first_term:
            first_term.append(now)
        log.info("signal %d: stopping (in-flight requests may finish)", signum)
        stop.set()

    def reopen_logs(signum, frame):
        app.access_log.reopen()
        if workers is not None:
            workers.signal_all(signal.SIGHUP)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGHUP, reopen_logs)
    sdnotify.notify("READY=1")  # both listeners are bound: systemd may call us started
    ready_file = os.environ.get("CONTENTNODE_READY_FILE")
    if ready_file:
        with open(ready_file, "w") as f:
            f.write(f"{app.listeners.servers['admin'].server_address[1]} {app.listeners.servers['public'].server_address[1]}\n")
    while not stop.wait(1.0):
        pass
    drain(app, workers, hurry, config.drain_seconds)
    if workers is not None:
        workers.stop(hurry)
    app.stop()
    lock.release()
    log.info("stopped")
    return 0


def drain(app, workers, hurry: threading.Event, seconds: float) -> None:
    """/healthz answers 503 for `seconds` while every other request is still served (workers too)."""
    if workers is not None:
        workers.begin_stop(hurry)
    if hurry.is_set() or not seconds:
        return
    log.info("draining for %.1f s: the public /healthz answers 503, requests are still served", seconds)
    app.drain()
    hurry.wait(seconds)
