"""Two public workers over their whole life: read your writes, a quick stop, no orphan after kill -9.

- A rule created through the admin API is served by every worker from the very
  next request after its 201 (not within a polling period).
- Stopping a node after keep-alive traffic takes well under the 10 s grace, and
  no worker has to be killed: idle keep-alive connections do not hold a stop.
- Whatever the daemon dies of (kill -9 here, also after a worker was restarted
  from the daemon's watcher thread), its workers stop within seconds and the
  public port answers nobody.
"""

import http.client
import os
import signal
import socket
import time

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.two_workers import TwoWorkerNode, alive, both_serving, serving_pids, start_two_workers, wait_until

pytestmark = pytest.mark.daemon_process

NONCE_PATH = "/.well-known/service/check?nonce=" + "n" * 20


def keep_alive_connections(node, count=8) -> list:
    """Connections that each made a few requests and stay open, idle, spread over the workers."""
    connections = []
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", node.public_port, timeout=10)
        for _ in range(3):
            conn.request("GET", NONCE_PATH, headers={"Host": "any.example"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200
        connections.append(conn)
    return connections


def test_a_new_rule_is_served_by_every_worker_on_the_very_next_request(tmp_path, seaweed):  # noqa: F811
    site = Site(str(tmp_path), seaweed, node_class=TwoWorkerNode)
    try:
        assert both_serving(site.node)
        earlier = keep_alive_connections(site.node, 4)   # threads already waiting in both workers
        for n in range(8):
            site.put(f"ryw{n}/file.txt", b"fresh %d" % n, "text/plain")
            site.add_rule(f"/ryw{n}", prefix=f"ryw{n}/")
            fresh = [site.get(f"/ryw{n}/file.txt") for _ in range(4)]   # new connections
            assert [r.status for r in fresh] == [200] * 4, [r.body for r in fresh]
            for conn in earlier:
                conn.request("GET", f"/ryw{n}/file.txt", headers={"Host": site.host})
                response = conn.getresponse()
                assert (response.status, response.read()) == (200, b"fresh %d" % n)
    finally:
        site.close()


def test_stop_after_keep_alive_traffic_is_quick_and_kills_no_worker(tmp_path):
    for attempt in range(2):   # a worker stuck in accept() was a matter of luck: try twice
        workdir = tmp_path / f"n{attempt}"
        workdir.mkdir()
        node = start_two_workers(str(workdir), env={"CONTENTNODE_DRAIN_SECONDS": "0"})  # no drain: the stop alone
        connections = keep_alive_connections(node)
        started = time.monotonic()
        status = node.stop(timeout=30)
        took = time.monotonic() - started
        log = node.log()
        assert "did not stop" not in log and status == 0, log[-2000:]
        assert took < 2.0, f"stop took {took:.1f} s"
        for conn in connections:
            conn.close()


def test_kill_9_of_the_daemon_leaves_no_worker(tmp_path):
    for attempt in range(4):
        workdir = tmp_path / f"n{attempt}"
        workdir.mkdir()
        node = start_two_workers(str(workdir))
        if attempt % 2:   # a worker restarted by the daemon's watcher thread, not the main thread
            os.kill(serving_pids(node)[0], signal.SIGKILL)
            assert wait_until(lambda n=node: len(serving_pids(n)) == 3, 20), node.log()
        workers = [pid for pid in serving_pids(node) if alive(pid)]
        assert len(workers) == 2
        connections = keep_alive_connections(node, 4)
        node.kill()
        assert wait_until(lambda pids=workers: not any(alive(pid) for pid in pids), 5), \
            f"attempt {attempt}: workers still alive after kill -9 of the daemon: {workers}"
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", node.public_port), timeout=2).close()
        for conn in connections:
            conn.close()
