"""Issue 12 item 2 against a real SeaweedFS: cache fills respect cache_max_bytes on disk, and
visitors who hang up stop the origin downloads they started."""

import os
import socket
import threading
import time

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture
def site(tmp_path, seaweed):  # noqa: F811
    instance = Site(str(tmp_path), seaweed)
    instance.add_rule("/static", prefix="site/", cache_ttl=600)
    yield instance
    instance.close()


def _disk_bytes(root):
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except FileNotFoundError:
                pass
    return total


def _hang_up_after_headers(site, path, answers):
    with socket.create_connection(("127.0.0.1", site.node.public_port), timeout=30) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {site.host}\r\n\r\n".encode())
        answers.append(sock.recv(12))


def test_thirty_visitors_hanging_up_on_a_20_mb_object_stay_under_a_1_mib_cap(site):
    assert site.admin.put("/api/settings", {"cache_max_bytes": 1 << 20}).status == 200
    site.node.restart()  # the cache follows the setting at its next periodic sync; a restart applies it now
    site.put("site/big.bin", os.urandom(20 << 20))
    cache_dir = os.path.join(site.node.data_dir, "cache")
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], _disk_bytes(cache_dir))
            time.sleep(0.005)
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        answers = []
        visitors = [threading.Thread(target=_hang_up_after_headers, args=(site, "/static/big.bin", answers))
                    for _ in range(30)]
        for t in visitors:
            t.start()
        for t in visitors:
            t.join(60)
        time.sleep(1.0)
    finally:
        stop.set()
        watcher.join()
    gets = site.origin_gets("site/big.bin")
    print(f"peak cache dir {peak[0]} bytes, origin GETs {gets}, cache dir after {_disk_bytes(cache_dir)} bytes")
    assert answers == [b"HTTP/1.1 200"] * 30
    assert peak[0] <= 1 << 20
    # the object is still served whole to a visitor who stays
    response = site.get("/static/big.bin")
    assert response.status == 200 and len(response.body) == 20 << 20

