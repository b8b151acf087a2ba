"""OS calls a sandbox refuses (EPERM, as under the unit's `SystemCallFilter=` with
`SystemCallErrorNumber=EPERM`): each is logged once per process and the node serves on
(docs/API.md, "Refused OS calls"). The daemon and its public workers run under a real
seccomp filter (tests/peers/seccomp_exec.py, Debian's python3-seccomp): CPU affinity,
the cache ledger's record locks, sendfile and the data dir's flock are all refused, and cached objects, small and large, are still served whole, twice.
"""

import fcntl
import functools
import os
import re

import pytest

from tests.content_setup import Site
from tests.node import ROOT, Node
from tests.peers.check import SYSTEM_PYTHON
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

pytestmark = pytest.mark.daemon_process

DENY = ["sched_setaffinity", "sendfile",
        f"fcntl:1={fcntl.F_SETLK}", f"fcntl:1={fcntl.F_SETLKW}", "flock"]
LAUNCHER = [SYSTEM_PYTHON, os.path.join(ROOT, "tests", "peers", "seccomp_exec.py"),
            *(arg for rule in DENY for arg in ("--deny", rule)), "--"]
WORKERS = 2
PINNED = len(os.sched_getaffinity(0)) >= 2   # with one CPU nothing asks for affinity
LARGE = 2 * 1024 * 1024 + 3                  # sent from the entry file (sendfile), not from memory


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    node_class = functools.partial(Node, env={"CONTENTNODE_PUBLIC_WORKERS": str(WORKERS)}, launcher=LAUNCHER)
    instance = Site(str(tmp_path_factory.mktemp("refused")), seaweed, node_class=node_class)
    instance.add_rule("/files", prefix="refused/")
    yield instance
    instance.close()


def refusals(site) -> dict:
    """{call: [the process ids that logged its refusal, one entry per line]}."""
    found = {}
    for call, pid in re.findall(r"the OS refused (\S+) \(EPERM\) in process (\d+)", site.node.log()):
        found.setdefault(call, []).append(int(pid))
    return found


def served_twice(site, name: str, data: bytes) -> None:
    site.put(f"refused/{name}", data)
    for attempt in range(2):
        response = site.get(f"/files/{name}")
        assert response.status == 200 and response.body == data, (attempt, response.status, len(response.body))
    assert response.headers.get("x-cache") == "HIT"


def test_refused_calls_are_logged_once_and_the_node_serves_on(site):
    for round_ in range(2):   # later refusals of a call in a process add no line
        for turn in range(2 * WORKERS):   # connections land on either worker
            served_twice(site, f"{round_}-small-{turn}.txt", b"small %d\n" % turn)
            served_twice(site, f"{round_}-large-{turn}.bin", os.urandom(LARGE))
    logged = refusals(site)
    for call, pids in logged.items():
        assert len(pids) == len(set(pids)), f"{call} logged twice by one process: {pids}"
    # every process opens the shared cache ledger and takes its liveness byte there
    workers = set(logged.get("fcntl.lockf", [])) - {site.node.proc.pid}
    assert len(workers) == WORKERS and site.node.proc.pid in logged["fcntl.lockf"], logged
    assert logged.get("flock") == [site.node.proc.pid], logged       # the daemon's data dir lock
    assert logged.get("sendfile") and set(logged["sendfile"]) <= workers, logged
    assert set(logged.get("sched_setaffinity", [])) == (workers if PINNED else set()), logged
    assert set(logged) <= {"flock", "fcntl.lockf", "sendfile", "sched_setaffinity"}
    assert site.admin.get("/healthz").status == 200
    assert "Traceback" not in site.node.log()
