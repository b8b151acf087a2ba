"""A daemon whose public port two worker processes serve, and what the multi-process tests read
of them: one start that waits for both workers (a request sent before the second serves can only
reach the first), the workers' pids from the log, and their write counts from /proc."""

import re
import time

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

STARTED = re.compile(r"public worker (\d+) started")
SERVING = re.compile(r"public worker (\d+) serving")


class TwoWorkerNode(Node):
    def __init__(self, workdir, env=None, args=()):
        super().__init__(workdir, env={"CONTENTNODE_PUBLIC_WORKERS": "2", **(env or {})}, args=args)


def wait_until(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def serving_pids(node) -> list[int]:
    """Every worker that said it serves, restarted ones included (a restart logs again)."""
    return [int(pid) for pid in SERVING.findall(node.log())]


def both_serving(node, seconds: float = 20) -> bool:
    return wait_until(lambda: len(serving_pids(node)) == 2, seconds)


def until_both_answer(node, ask, rounds: int = 10) -> list:
    """What `ask()` answers (a list), asked again until each public worker answered some of it: the
    kernel picks the worker that accepts each connection, and may give one of them a whole short run."""
    answers: list = []
    for _ in range(rounds):
        before = worker_syscalls(node)
        answers += ask()
        after = worker_syscalls(node)
        if all(after[pid] > before[pid] for pid in before):
            return answers
    raise AssertionError(f"in {rounds} runs one public worker answered nothing")


def start_two_workers(workdir, env=None) -> TwoWorkerNode:
    """A started TwoWorkerNode once both workers serve (killed, its log in the failure, if not)."""
    node = TwoWorkerNode(workdir, env=env).start()
    if not both_serving(node):
        node.kill()
        raise AssertionError(f"the two public workers did not both serve:\n{node.log()}")
    return node


@pytest.fixture
def two_workers_with_admin(tmp_path):
    """(node, admin client): a started TwoWorkerNode, both workers serving, its first administrator made."""
    node = start_two_workers(str(tmp_path))
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        yield node, admin
    finally:
        node.close()


def worker_pids(node) -> list[int]:
    return [int(pid) for pid in STARTED.findall(node.log())]


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a reaped or exited worker is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def live_workers(node) -> list[int]:
    return [pid for pid in worker_pids(node) if alive(pid)]


def syscalls(pid: int) -> int:
    """write(2)-family calls the process made so far: a served request writes its access line."""
    with open(f"/proc/{pid}/io") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["syscw"])


def worker_syscalls(node) -> dict:
    return {pid: syscalls(pid) for pid in worker_pids(node)}
