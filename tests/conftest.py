"""Shared fixtures: a fresh node per test, an administrator logged in to it, the peers.

`node` is a daemon process (tests/node.py Node) unless the test or its module
is marked `in_process`: then it is the App built in the test process
(tests/inprocess.py InProcessNode). `daemon_process` on a test in such a
module brings the process back for that test (SIGKILL, signals, restarts).
"""

import pytest

from tests.inprocess import node_class
from tests.node import ADMIN_PASSWORD, ADMIN_USER, DEFAULT_HASH_COST
from tests.peers.check import missing_peers
from tests.panel_browser import browser  # noqa: F401  (one chromium per worker: see panel_browser.browser)
from tests.peers.seaweed import seaweed  # noqa: F401  (the session's SeaweedFS, for every module)

pytest_plugins = ("tests.file_times",)  # --file-times=PATH: wall, CPU and processes per test file


def pytest_configure(config):
    config.addinivalue_line("markers", "in_process: `node` is the App in the test process (InProcessNode)")
    config.addinivalue_line("markers", "daemon_process: `node` is a daemon process even in an in_process module")
    config.addinivalue_line("markers", "default_hash_cost: `node` hashes passwords at the node's default "
                            "argon2id cost, not tests/node.py LEAST_HASH_COST")


# The files whose tests run longest, longest first: each file's wall time in one whole `-n 3` run
# measured with --file-times (tests/file_times.py; the first is one test that mostly waits for its
# two public workers). With two files queued per worker at the start (pytest-xdist), the first six
# are spread over three workers before anything else.
STARTED_FIRST = ("test_traffic_memory.py", "test_panel_journey.py", "test_schemathesis.py", "test_startup.py",
                 "test_cache_faults.py", "test_body_schemas.py", "test_fleet_refusals.py", "test_fleet_panel.py",
                 "test_fleet_caps.py", "test_crash_safety.py", "test_worker_lifecycle.py", "test_cli_users.py")


def pytest_collection_modifyitems(items):
    """The longest files first: with `--dist loadfile --no-loadscope-reorder` (make test) each goes
    to its own worker at the start instead of being the tail of the run."""
    def rank(item):
        name = item.path.name
        return STARTED_FIRST.index(name) if name in STARTED_FIRST else len(STARTED_FIRST)
    items.sort(key=rank)  # stable: the rest keep pytest's order


def pytest_sessionstart(session):
    """Stop before any test runs when a peer is missing: one message, not a traceback per test."""
    problems = missing_peers()
    if problems:
        pytest.exit("test peers missing (make test installs them):\n  " + "\n  ".join(problems),
                    returncode=3)


@pytest.fixture
def node(request, tmp_path):
    """A running node with an empty data dir (setup not done)."""
    env = DEFAULT_HASH_COST if request.node.get_closest_marker("default_hash_cost") else None
    instance = node_class(request)(str(tmp_path), env=env).start()
    yield instance
    instance.close()


@pytest.fixture
def admin(node):
    """A client logged in as the first administrator of `node`."""
    client = node.client()
    response = client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert response.status == 201, response.body
    return client


@pytest.fixture(autouse=True)
def close_browser_contexts(request):
    """Close the browser contexts a test left open. An open page keeps rendering for the rest of
    the session (a spinner animates at 60 frames a second in software): nine pages left by one file
    cost a quarter of a core until the worker ended (tests/file_times.py measured it)."""
    if "browser" not in request.fixturenames:
        yield
        return
    browser = request.getfixturevalue("browser")
    before = list(browser.contexts)
    yield
    for context in browser.contexts:
        if not any(context is kept for kept in before):
            context.close()
