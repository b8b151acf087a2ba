"""The public port against a hostile client (docs/ARCHITECTURE.md, "Connection handling"): slow
readers from a few addresses cannot hold every pool thread.

Against the real daemon on loopback; 127.0.0.2 to 127.0.0.9 are other client addresses.
"""

import select
import socket
import time

import pytest

from tests.node import Node
from tests.test_public_connections import HOST, BigSite, connect_from, healthz_from

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


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("VmRSS:")))


def test_unfinished_heads_are_held_within_the_process_budget(tmp_path):
    """480 connections from 8 addresses each send 60 KB of a head without its blank line: with a
    4 MiB budget the oldest are closed, RSS grows by the budget (not 480 x 60 KB = 28 MB), and
    another client is served."""
    node = Node(str(tmp_path), env={"CONTENTNODE_HEADER_TIMEOUT": "30",
                                    "CONTENTNODE_MAX_UNFINISHED_HEAD_BYTES": str(4 << 20)}).start()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 60000
    socks = []
    try:
        before = rss_kib(node.proc.pid)
        for n in range(480):
            sock = connect_from(f"127.0.0.{2 + n % 8}", node.public_port)
            socks.append(sock)
            try:
                sock.sendall(head)
            except OSError:
                pass   # closed by the node meanwhile: the point
        time.sleep(1.5)
        grown = rss_kib(node.proc.pid) - before
        closed = sum(1 for sock in socks if was_closed(sock))
        print(f"RSS grown by {grown} KiB with 480 unfinished 60 KB heads; {closed} closed")
        assert grown < 12 * 1024, grown
        assert closed >= 480 - (4 << 20) // 60000 - 8, closed
        assert not was_closed(socks[-1])   # the newest are kept
        assert healthz_seconds("127.0.0.1", node.public_port) < 1.0
    finally:
        for sock in socks:
            sock.close()
        node.close()


def was_closed(sock: socket.socket) -> bool:
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def test_partial_client_hellos_hold_no_thread(tmp_path):
    """40 HTTPS connections from 8 addresses send 11 bytes of a ClientHello and stop, on a node with
    4 threads and a 10 s header_timeout: another HTTPS client is served at once."""
    site = BigSite(str(tmp_path), env={"CONTENTNODE_PUBLIC_THREADS": "4", "CONTENTNODE_HEADER_TIMEOUT": "10"})
    stuck = []
    try:
        for n in range(40):
            sock = connect_from(f"127.0.0.{2 + n % 8}", site.https_port)
            sock.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # a record of 512 bytes, begun
            stuck.append(sock)
        time.sleep(0.5)
        started = time.monotonic()
        with connect_from("127.0.0.1", site.https_port) as raw:
            with site.tls.wrap_socket(raw, server_hostname=HOST) as sock:
                sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert time.monotonic() - started < 1.0
    finally:
        for sock in stuck:
            sock.close()
        site.node.close()
