"""public_cpu_affinity: the public port's threads keep to one CPU; the rest of the daemon does not."""

import os
import subprocess
import sys

import pytest

from tests.node import ROOT, Node

pytestmark = pytest.mark.daemon_process

ALLOWED = sorted(os.sched_getaffinity(0))


def thread_cpus(pid: int) -> dict:
    """{thread id: the CPUs it may run on} for every thread of a process."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        except ProcessLookupError:
            pass  # a connection's thread that just ended
    return found


def test_public_threads_keep_to_one_cpu_by_default(tmp_path):
    node = Node(str(tmp_path)).start()
    try:
        assert node.client("public").get("/healthz").status in (200, 404)
        cpus = thread_cpus(node.proc.pid)
        assert cpus[node.proc.pid] == ALLOWED  # the main thread (and with it the admin API) is free
        pinned = [tid for tid, allowed in cpus.items() if allowed != ALLOWED]
        if len(ALLOWED) < 2:
            assert pinned == []  # one CPU: nothing to choose
        else:
            assert len(pinned) >= 2, cpus  # the public accept loop and its watchdog
            assert all(cpus[tid] == [ALLOWED[0]] for tid in pinned), cpus
    finally:
        node.close()


def test_off_leaves_every_thread_to_the_scheduler(tmp_path):
    node = Node(str(tmp_path), env={"CONTENTNODE_PUBLIC_CPU_AFFINITY": "off"}).start()
    try:
        assert all(allowed == ALLOWED for allowed in thread_cpus(node.proc.pid).values())
    finally:
        node.close()


def test_a_bad_value_is_a_config_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_PUBLIC_CPU_AFFINITY="sometimes")
    result = subprocess.run([sys.executable, "-m", "contentnode", "serve", "--data-dir", str(tmp_path / "d")],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "public_cpu_affinity" in result.stderr and "auto, off" in result.stderr
    assert not (tmp_path / "d").exists()
