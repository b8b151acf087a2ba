"""Shared fixtures: a fresh daemon per test, and an administrator logged in to it."""

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.peers.check import missing_peers


def pytest_sessionstart(session):
    """Stop before any test runs when a peer is missing: one message, not a traceback per test."""
    problems = missing_peers()
    if problems:
        pytest.exit("test peers missing (make test installs them):\n  " + "\n  ".join(problems),
                    returncode=3)


@pytest.fixture
def node(tmp_path):
    """A running daemon with an empty data dir (setup not done)."""
    instance = Node(str(tmp_path)).start()
    yield instance
    instance.kill()


@pytest.fixture
def admin(node):
    """A client logged in as the first administrator of `node`."""
    client = node.client()
    response = client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert response.status == 201, response.body
    return client
