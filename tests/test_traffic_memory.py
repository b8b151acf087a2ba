"""Traffic insight in bounded memory: 100,000 distinct paths through two public workers grow the
daemon's and the workers' resident memory together by at most 30 MB, the path sent every tenth
request still leads the top, and the top query answers in under 200 ms (both measured here)."""

import socket
import threading
import time

import pytest

from tests.two_workers import live_workers, wait_until
from tests.test_traffic_insight import HOST, start_site

pytestmark = pytest.mark.daemon_process

DISTINCT = 100_000
WARM = 5_000       # before the baseline: the allocator's and the fixed caches' first growth
THREADS = 4
BATCH = 50         # requests written at once on each connection
HOT_EVERY = 10     # every tenth request is /hot.txt: it must stay in the summaries
MAX_GROWTH = 30 << 20
MAX_QUERY_SECONDS = 0.2


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def send_paths(port: int, start: int, count: int) -> None:
    """`count` requests for distinct paths (and /hot.txt every HOT_EVERY) over kept-alive connections,
    pipelined BATCH at a time (the daemon answers them in order; a round trip per request made this
    test's run time mostly waiting)."""
    def run(offset: int):
        numbers = list(range(start + offset, start + count, THREADS))
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        reader = sock.makefile("rb")
        try:
            for first in range(0, len(numbers), BATCH):
                batch = numbers[first:first + BATCH]
                sock.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (
                    b"/hot.txt" if i % HOT_EVERY == 0 else b"/p/%d.bin?q=%d" % (i, i), HOST.encode())
                    for i in batch))
                for _ in batch:
                    read_answer(reader)
        finally:
            reader.close()
            sock.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def read_answer(reader) -> None:
    """One answer off a kept-alive connection; a close would cut the batch, so it fails the test."""
    status = reader.readline()
    assert status.startswith(b"HTTP/1.1 "), status
    length = None
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        assert not (name.strip().lower() == b"connection" and value.strip().lower() == b"close"), status
    assert length is not None, status
    assert len(reader.read(length)) == length


def counted(admin) -> int:
    answer = admin.get(f"/api/traffic/top?domain={HOST}&range=1h&by=status").json
    return sum(row["requests"] for row in answer["top"])


def test_distinct_paths_leave_memory_bounded_and_the_top_query_fast(tmp_path):
    node, admin = start_site(str(tmp_path))
    try:
        pids = [node.proc.pid, *live_workers(node)]
        assert len(pids) == 3
        send_paths(node.public_port, 0, WARM)
        assert wait_until(lambda: counted(admin) == WARM, 30)
        before = sum(rss(pid) for pid in pids)
        send_paths(node.public_port, WARM, DISTINCT)
        assert wait_until(lambda: counted(admin) == WARM + DISTINCT, 60)
        growth = sum(rss(pid) for pid in pids) - before
        print(f"RSS growth over {DISTINCT} distinct paths: {growth / (1 << 20):.1f} MiB")
        assert growth <= MAX_GROWTH, f"RSS grew by {growth / (1 << 20):.1f} MiB"

        for range_name in ("1h", "24h", "7d"):
            started = time.perf_counter()
            answer = admin.get(f"/api/traffic/top?domain={HOST}&range={range_name}&by=path")
            took = time.perf_counter() - started
            print(f"top by path over {range_name}: {1000 * took:.1f} ms")
            assert answer.status == 200 and took < MAX_QUERY_SECONDS, (range_name, took)
            top = answer.json
            assert top["approximate"] is True and len(top["top"]) == 20
            assert top["top"][0]["value"] == "/hot.txt"
            assert all("?" not in row["value"] for row in top["top"])
        statuses = {row["value"]: row["requests"] for row in admin.get(
            f"/api/traffic/top?domain={HOST}&by=status").json["top"]}
        assert statuses == {"404": (WARM + DISTINCT) * (HOT_EVERY - 1) // HOT_EVERY,
                            "200": (WARM + DISTINCT) // HOT_EVERY}
    finally:
        node.close()
