"""Slow clients, idle connections, the connection cap and graceful shutdown (docs/API.md, "Connections")."""

import http.client
import json
import signal
import socket
import threading
import time

import pytest

from tests.inprocess import node_class
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # sockets to the App's listeners; SIGTERM needs a daemon process


def healthz(port, timeout=1.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.fixture
def tuned_node(request, tmp_path):
    instance = node_class(request)(str(tmp_path), env={"CONTENTNODE_REQUEST_TIMEOUT": "2", "CONTENTNODE_IDLE_TIMEOUT": "3",
                                        "CONTENTNODE_MAX_CONNECTIONS": "8"}).start()
    yield instance
    instance.close()


def test_slow_client_and_200_idle_connections_do_not_block_health(node):
    stop = threading.Event()

    def slow_client():
        with socket.create_connection(("127.0.0.1", node.admin_port)) as sock:
            for byte in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n":
                if stop.wait(1.0):
                    return
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    return

    slow = threading.Thread(target=slow_client, daemon=True)
    slow.start()
    idle = [socket.create_connection(("127.0.0.1", node.admin_port)) for _ in range(200)]
    try:
        time.sleep(0.5)
        for _ in range(5):
            assert healthz(node.admin_port, timeout=1.0) == 200
    finally:
        stop.set()
        for sock in idle:
            sock.close()


def test_slow_request_is_cut_off(tuned_node):
    with socket.create_connection(("127.0.0.1", tuned_node.admin_port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        for _ in range(20):  # one byte every 0.5 s: each read arrives within any per-read timeout
            try:
                sock.send(b"X")
            except OSError:
                break
            time.sleep(0.5)
            try:
                sock.setblocking(False)
                if sock.recv(1) == b"":
                    break
            except BlockingIOError:
                pass
            finally:
                sock.setblocking(True)
        assert time.monotonic() - started < 8  # cut near the 2 s request deadline, not after 10 s of dribbling


def test_idle_connection_closed_after_idle_timeout(tuned_node):
    with socket.create_connection(("127.0.0.1", tuned_node.admin_port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closes the idle keep-alive connection
        assert 2 < time.monotonic() - started < 8


def test_over_capacity_gets_503_not_a_thread(tuned_node):
    held = [socket.create_connection(("127.0.0.1", tuned_node.admin_port)) for _ in range(8)]
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", tuned_node.admin_port), timeout=5) as extra:
            extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            reply = extra.recv(65536)
        assert reply.startswith(b"HTTP/1.1 503 ") and b"overloaded" in reply
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert healthz(tuned_node.admin_port, timeout=5) == 200


@pytest.mark.daemon_process
def test_graceful_shutdown_finishes_in_flight_request(node):
    setup = json.dumps({"username": ADMIN_USER, "password": ADMIN_PASSWORD}).encode()
    with socket.create_connection(("127.0.0.1", node.admin_port), timeout=15) as sock:
        sock.sendall(b"POST /api/setup HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(setup))
        assert sock.recv(100).startswith(b"HTTP/1.1 100")  # the request is now in flight
        node.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        sock.sendall(setup)
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 201 ") and b"Connection: close" in reply
    assert node.proc.wait(15) == 0
    node.start()
    assert node.client().login(ADMIN_USER, ADMIN_PASSWORD).status == 200  # the acknowledged write is there
