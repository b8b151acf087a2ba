"""The in-process node (tests/inprocess.py) leaves nothing behind and shares nothing with another one.

xdist workers run hundreds of these nodes one after the other in one process:
a listener, thread, descriptor, log handler or log level left over, or state
shared between two Apps, would leak into the tests that follow.
"""

import logging
import os
import socket
import threading

import pytest

from tests.inprocess import InProcessNode
from tests.node import ADMIN_PASSWORD, ADMIN_USER


def _open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_a_stopped_node_leaves_no_listener_thread_descriptor_or_logging(tmp_path):
    threads, fds = set(threading.enumerate()), _open_fds()
    root_level, handlers = logging.getLogger().level, list(logging.getLogger("contentnode").handlers)
    node = InProcessNode(str(tmp_path)).start()
    client = node.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    assert client.put("/api/settings", {"log_level": "debug"}).status == 200
    assert node.client("public").get("/healthz").status in (200, 404)
    ports = (node.admin_port, node.public_port)
    node.close()
    assert all(_refused(port) for port in ports)
    assert {t.name for t in set(threading.enumerate()) - threads} <= {"outbound-deadlines"}
    assert _open_fds() <= fds, "descriptors left open"
    assert logging.getLogger().level == root_level
    assert logging.getLogger("contentnode").handlers == handlers
    assert "method=PUT path=/api/settings status=200" in node.log()


def test_two_nodes_in_one_process_hold_their_own_state(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = InProcessNode(str(tmp_path / "a")).start()
    second = InProcessNode(str(tmp_path / "b")).start()
    try:
        one, two = first.client(), second.client()
        assert one.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        second.set_clock_offset(86400 * 400)
        assert two.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 401
        assert two.post("/api/setup", {"username": "other", "password": ADMIN_PASSWORD}).status == 201
        assert one.get("/api/me").json["user"]["username"] == ADMIN_USER
        assert two.get("/api/me").json["user"]["username"] == "other"
        assert first.app.clock.now() + 86400 * 399 < second.app.clock.now()
    finally:
        first.close()
        second.close()


def test_it_refuses_what_only_a_process_can_do(tmp_path):
    with pytest.raises(ValueError, match="use Node"):
        InProcessNode(str(tmp_path), env={"SSL_CERT_FILE": "/x"})
    node = InProcessNode(str(tmp_path)).start()
    try:
        with pytest.raises(RuntimeError, match="SIGKILL"):
            node.kill()
        refused = node.cli("user", "list")
        assert refused.returncode != 0 and "in use" in refused.stderr
    finally:
        node.close()
