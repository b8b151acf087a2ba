"""The daemon a panel test drives in a browser, and the first steps every such journey takes.

A daemon process, not the in-process App: Playwright's own threads would count as the App's.
Killed at the end: nothing is checked after the browser has closed.
"""

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node


@pytest.fixture
def node(tmp_path):
    instance = Node(str(tmp_path)).start()
    yield instance
    instance.kill()


def set_up(node, host: str = "localhost"):
    """An API client of `node` once the first administrator is made and the domain `host` added
    (localhost: the name the browser's requests to the public port carry)."""
    api = node.client()
    assert api.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    assert api.post("/api/domains", {"host": host}).status == 201
    return api
