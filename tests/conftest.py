"""Shared fixtures: a fresh daemon per test, and an administrator logged in to it."""

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node


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
