"""`make run` stopped by SIGTERM to its process group (a terminal's job control, a supervisor):
the daemon gets the signal twice, from the group and forwarded by make, and must still drain
(docs/API.md, "Health and drain"), not take the second as "stop at once"."""

import os
import signal
import subprocess
import time

import pytest

from tests.node import ROOT
from tests.test_drain import health
from tests.two_workers import wait_until

pytestmark = pytest.mark.daemon_process

DRAIN = 3.0


class Ports:
    """What tests.test_drain.health needs of a node."""

    def __init__(self, public_port: int):
        self.public_port = public_port


def test_make_run_stopped_through_its_process_group_drains(tmp_path):
    ready = tmp_path / "ready"
    env = dict(os.environ, CONTENTNODE_ADMIN_PORT="0", CONTENTNODE_PUBLIC_PORT="0",
               CONTENTNODE_PUBLIC_BIND="127.0.0.1", CONTENTNODE_DRAIN_SECONDS=str(DRAIN),
               CONTENTNODE_READY_FILE=str(ready))
    log = open(tmp_path / "make.log", "wb")
    make = subprocess.Popen(["make", "-s", "run", f"DATA_DIR={tmp_path / 'var'}"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_until(lambda: ready.exists() and len(ready.read_text().split()) == 2, 30), \
            (tmp_path / "make.log").read_text()
        node = Ports(int(ready.read_text().split()[1]))
        assert health(node)[0] == 200
        signalled = time.monotonic()
        os.killpg(make.pid, signal.SIGTERM)
        time.sleep(0.05)  # what make's forwarding of the same signal amounts to (GNU make does, on some versions)
        os.killpg(make.pid, signal.SIGTERM)
        assert wait_until(lambda: (health(node) or (0,))[0] == 503, 2)
        time.sleep(1.0)
        assert (health(node) or (0,))[0] == 503, "the drain was cut short"
        make.wait(timeout=DRAIN + 15)
        assert time.monotonic() - signalled >= DRAIN - 0.5
        text = (tmp_path / "make.log").read_text()
        assert text.count("signal 15") >= 2 and "draining for 3.0 s" in text, text
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
        make.wait()
        log.close()
