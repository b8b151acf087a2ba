"""The node built by build_app inside the test process: Node's surface without a process per test.

A daemon process costs a Python start-up and the import of every module
(about 0.25 s of CPU) per test; most tests only speak HTTP to the node, and
for those the App built through the real composition root (contentnode.app.
build_app, the injected Clock on the node's clock file, both listeners on
port 0) answers the same requests. What only a process has stays with Node:
SIGKILL and crash safety, signals, the start-up of `contentnode serve`
(messages, exit codes, the ready file), environment other than CONTENTNODE_*
start-up values (SSL_CERT_FILE, PYTHONPATH, NOTIFY_SOCKET) and flags.
"""

import logging
import os
import re
import threading
import time

from contentnode import config as config_module
from contentnode.app import build_app
from contentnode.clock import Clock
from contentnode.logs import Formatter
from contentnode.fileio import DataDirLock, ensure_private_dir, remove_stale_temps
from tests.node import Node

# One per process by design (core.netguard's outbound deadlines): not the App's to stop.
PROCESS_THREADS = {"outbound-deadlines"}
DEFAULT_THREAD_NAME = re.compile(r"Thread-\d+")
STOP_SECONDS = 10.0
# The daemon's accept loops look for stop() every 0.25 s, so each stop waited about that long
# per listener: half a second of every test. 50 wake-ups a second cost the test process little.
ACCEPT_POLL_SECONDS = 0.02


class InProcessNode(Node):
    """The App in this process: ports, client(), data_dir, set_clock_offset(), log(), cli(), restart().

    log() holds what the daemon would write to stderr while this node ran: the
    contentnode.* log records in the daemon's format and the access lines.
    When two in-process nodes run at the same time, each log holds both
    nodes' records (the logger is per process), and the check that every
    thread has ended waits for the last of them. kill() is refused: an App in
    this process cannot be SIGKILLed; a test that needs it uses Node.
    """

    _running: list = []  # the in-process nodes running now, in start order
    _quiet: tuple = (set(), logging.WARNING)  # threads and root log level before the first of them started

    def __init__(self, workdir: str, env: dict | None = None, args=()):
        not_config = sorted(k for k in (env or {}) if not k.startswith("CONTENTNODE_"))
        if not_config or args:
            raise ValueError(f"an in-process node takes CONTENTNODE_* start-up values only, not "
                             f"{not_config or list(args)}: use Node (a daemon process) for that")
        super().__init__(workdir, env)
        self.app = None

    def start(self, timeout: float = 20.0) -> "InProcessNode":
        """The daemon's steps before and around build_app (daemon.serve), minus the process-wide ones."""
        environ = {k: v for k, v in os.environ.items() if k.startswith("CONTENTNODE_")}
        environ.update(self.extra_env)
        config = config_module.load(None, {"data_dir": self.data_dir, "admin_port": 0, "public_port": 0,
                                           "public_bind": "127.0.0.1"}, environ=environ)
        if not InProcessNode._running:
            InProcessNode._quiet = (set(threading.enumerate()), logging.getLogger().level)
        InProcessNode._running.append(self)
        try:
            self._open_log(config.log_level)
            ensure_private_dir(self.data_dir)
            self._lock = DataDirLock(self.data_dir)
            self._lock.acquire()
            remove_stale_temps(self.data_dir)
            app = build_app(config, Clock(self.clock_file))
            app.access_log.stream = self._log
            app.listeners.accept_poll_seconds = ACCEPT_POLL_SECONDS
            self.app = app
            app.start()
        except BaseException:
            self.stop()
            raise
        self.admin_port = app.listeners.servers["admin"].server_address[1]
        self.public_port = app.listeners.servers["public"].server_address[1]
        return self

    def stop(self, timeout: float = STOP_SECONDS) -> int:
        """App.stop() as on SIGTERM; after the last running in-process node, check its threads ended."""
        app, self.app = self.app, None
        try:
            if app is not None:
                app.stop()
        finally:
            if getattr(self, "_lock", None) is not None:
                self._lock.release()
                self._lock = None
            self._close_log()
            if self in InProcessNode._running:
                InProcessNode._running.remove(self)
        if not InProcessNode._running:
            threads_before, root_level = InProcessNode._quiet
            logging.getLogger().setLevel(root_level)  # as before the first node: a stored log_level changes it
            _check_threads_ended(threads_before, timeout)
        return 0

    def kill(self) -> None:
        raise RuntimeError("an in-process node cannot be SIGKILLed: run this test on Node (a daemon process)")

    def close(self) -> None:
        """The end of a test: a graceful stop (an App in this process must not outlive its test)."""
        if self.app is not None:
            self.stop()

    def _open_log(self, level: str) -> None:
        """The daemon's stderr for this node: a log file, the root level set as logging.basicConfig would."""
        self._log = open(self.log_path, "a", encoding="utf-8", errors="backslashreplace", buffering=1)
        self._handler = logging.StreamHandler(self._log)
        self._handler.setFormatter(Formatter())
        logging.getLogger().setLevel(level.upper())
        logging.getLogger("contentnode").addHandler(self._handler)

    def _close_log(self) -> None:
        if getattr(self, "_handler", None) is not None:
            logging.getLogger("contentnode").removeHandler(self._handler)
            self._handler = None
        super()._close_log()


def _check_threads_ended(threads_before: set, timeout: float) -> None:
    """Every thread the nodes started has ended (all of them get up to `timeout` s in all).

    The App names every thread it starts; threads with Python's default name
    (Thread-N) belong to the test's own peers and stubs, not to the node.
    """
    deadline = time.monotonic() + timeout
    left = []
    for thread in set(threading.enumerate()) - threads_before:
        if thread.name not in PROCESS_THREADS and not DEFAULT_THREAD_NAME.match(thread.name):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                left.append(thread.name)
    if left:
        raise AssertionError(f"threads of the in-process nodes still run {timeout} s after the last one "
                             f"stopped: {sorted(left)}")


def node_class(request):
    """InProcessNode for a test or module marked in_process (and not daemon_process), else Node."""
    if request.node.get_closest_marker("in_process") and not request.node.get_closest_marker("daemon_process"):
        return InProcessNode
    return Node
