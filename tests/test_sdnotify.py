"""Type=notify: the daemon says READY=1 on $NOTIFY_SOCKET once both listeners accept connections."""

import os
import socket
import threading
import uuid

from contentnode import sdnotify
from tests.node import Node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accepts(port) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def listen_for_ready(sock, ports, seen):
    """On the datagram, at once: the message and whether each listener already accepts."""
    sock.settimeout(30)
    message = sock.recv(4096)
    seen.append((message, [accepts(port) for port in ports]))


def start_notified(tmp_path, address, bind_to):
    ports = [free_port(), free_port()]
    seen = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(bind_to)
        listener = threading.Thread(target=listen_for_ready, args=(sock, ports, seen))
        listener.start()
        node = Node(str(tmp_path), env={"NOTIFY_SOCKET": address},
                    args=["--admin-port", str(ports[0]), "--public-port", str(ports[1])]).start()
        try:
            listener.join(30)
        finally:
            node.kill()
    assert (node.admin_port, node.public_port) == tuple(ports)
    return seen


def test_ready_is_sent_after_both_listeners_are_bound(tmp_path):
    path = os.path.join(tmp_path, "notify.sock")
    assert start_notified(tmp_path, path, path) == [(b"READY=1", [True, True])]


def test_abstract_namespace_socket(tmp_path):
    name = f"contentnode-test-{uuid.uuid4().hex}"
    assert start_notified(tmp_path, "@" + name, "\0" + name) == [(b"READY=1", [True, True])]


def test_no_socket_no_message(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.notify() is False
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    assert sdnotify.notify() is False
