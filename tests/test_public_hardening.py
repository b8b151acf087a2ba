"""The public port against a hostile client (docs/ARCHITECTURE.md, "Connection handling"): slow
readers from a few addresses cannot hold every pool thread.

Against the real daemon on loopback; 127.0.0.2 to 127.0.0.9 are other client addresses.
"""

import select
import socket
import time

import pytest

from tests.test_public_connections import HOST, BigSite, healthz_from

pytestmark = pytest.mark.daemon_process


def healthz_seconds(address: str, port: int) -> float:
    """Seconds /healthz took from `address`; infinity when it was not answered within 5 s."""
    try:
        return healthz_from(address, port)
    except OSError:
        return float("inf")


def stalled_download(address: str, port: int) -> socket.socket:
    """GET the 30 MB file with a tiny receive window and read nothing: the server's send blocks."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /big.bin HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
    return sock


def test_slow_readers_from_three_addresses_leave_threads_for_others(tmp_path):
    """6 pool threads, 2 requests served at once per address: 12 stalled downloads from 3 addresses
    held every thread before the cap (6 of 8 now); another client is served at once, and a waiting download
    starts when one of its address's served ones ends."""
    site = BigSite(str(tmp_path), env={"CONTENTNODE_PUBLIC_THREADS": "8",
                                       "CONTENTNODE_MAX_REQUESTS_PER_CLIENT": "2"})
    port = site.node.public_port
    readers = {address: [] for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4")}
    try:
        for _ in range(4):
            for address, socks in readers.items():
                socks.append(stalled_download(address, port))
        time.sleep(1.0)
        assert healthz_seconds("127.0.0.1", port) < 1.0
        assert healthz_seconds("127.0.0.5", port) < 1.0
        waiting = readers["127.0.0.3"]
        started = [sock for sock in waiting if socket_has_bytes(sock)]
        assert len(started) == 2, len(started)
        for sock in started:
            sock.close()
        late = [sock for sock in waiting if sock not in started]
        time.sleep(1.0)
        assert all(socket_has_bytes(sock) for sock in late)   # the waiting ones were served in turn
    finally:
        for socks in readers.values():
            for sock in socks:
                sock.close()
        site.node.close()


def socket_has_bytes(sock: socket.socket) -> bool:
    """The answer has begun to arrive (looked at without waiting)."""
    return bool(select.select([sock], [], [], 0)[0]) and sock.recv(16, socket.MSG_PEEK).startswith(b"HTTP/1.1 200")

