"""The public GET /healthz for load balancers and the drain on SIGTERM (docs/API.md, "Health and
drain"), against the real daemon, alone and with two public worker processes."""

import http.client
import signal
import time

import pytest

from contentnode.core.readiness import not_ready
from tests.node import Node
from tests.two_workers import wait_until

pytestmark = pytest.mark.daemon_process

DRAIN = 3.0


def health(node, host="anything.example.test"):
    """(status, body) of the public /healthz on a fresh connection; None once nothing listens."""
    conn = http.client.HTTPConnection("127.0.0.1", node.public_port, timeout=5)
    try:
        conn.request("GET", "/healthz", headers={"Host": host})
        response = conn.getresponse()
        return response.status, response.read().strip(), response.getheader("Connection")
    except OSError:
        return None
    finally:
        conn.close()


def test_ok_on_any_host_before_every_other_stage(tmp_path):
    node = Node(str(tmp_path)).start()
    try:
        for host in ("anything.example.test", "127.0.0.1", "localhost:1", "no such host!"):
            status, body, _ = health(node, host)
            assert (status, body) == (200, b'{"status":"ok"}'), (host, body)
        public = node.client("public")
        assert public.request("HEAD", "/healthz").status == 200
        answer = public.post("/healthz")
        assert answer.status == 405 and answer.headers["allow"] == "GET, HEAD"
        assert public.get("/healthz/more").status == 404  # only the exact path
    finally:
        node.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_drains_then_stops_by_itself(tmp_path, workers):
    node = Node(str(tmp_path), env={"CONTENTNODE_DRAIN_SECONDS": str(DRAIN),
                                    "CONTENTNODE_PUBLIC_WORKERS": str(workers)}).start()
    try:
        if workers > 1:
            assert wait_until(lambda: node.log().count("public worker") >= 4, 20), node.log()  # started, serving
        assert all(health(node)[0] == 200 for _ in range(6))
        signalled = time.monotonic()
        node.proc.send_signal(signal.SIGTERM)
        # the daemon passes SIGTERM on to its workers at once; each enters its drain when its own
        # handler runs (on a loaded machine a moment apart): wait until every process drains
        assert wait_until(lambda: all(health(node)[:2] == (503, b'{"status":"draining"}') for _ in range(4)),
                          3), node.log()
        during = [health(node) for _ in range(8)]  # new connections land on any process
        assert all(answer[:2] == (503, b'{"status":"draining"}') for answer in during), during
        assert all(answer[2] == "close" for answer in during)  # kept-alive clients go back to the balancer
        verification = node.client("public").get("/.well-known/service/check?nonce=" + "n" * 16)
        assert verification.status == 200  # every other request is still served
        assert node.client().get("/healthz").status == 200  # and the admin API
        assert time.monotonic() - signalled < DRAIN
        node.proc.wait(timeout=DRAIN + 15)
        took = time.monotonic() - signalled
        assert node.proc.returncode == 0 and DRAIN - 0.5 <= took, took
        assert health(node) is None  # the listeners are closed
        assert "draining for 3.0 s" in node.log() and "stopped" in node.log()
        assert "killed" not in node.log()  # every worker stopped after its own drain, none by SIGKILL
    finally:
        node.close()


def test_second_sigterm_ends_the_drain(tmp_path):
    node = Node(str(tmp_path), env={"CONTENTNODE_DRAIN_SECONDS": "60"}).start()
    try:
        node.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: (health(node) or (0,))[0] == 503, 2)
        time.sleep(0.6)  # one within 0.5 s of the first is the same stop request (test_make_run.py)
        node.proc.send_signal(signal.SIGTERM)
        node.proc.wait(timeout=10)
        assert node.proc.returncode == 0
    finally:
        node.close()


def test_not_ready_hook_reads_the_state_document():
    """The fleet hook: a replica that has never applied a bundle is not ready; no fleet section is ready."""
    assert not not_ready({})
    assert not not_ready({"fleet": {"role": "primary"}})
    assert not_ready({"fleet": {"role": "replica", "applied_at": None}})
    assert not not_ready({"fleet": {"role": "replica", "applied_at": "2026-11-24T10:00:00Z"}})
