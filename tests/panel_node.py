"""The daemon a panel test drives in a browser, and the steps its journeys share.

A daemon process, not the in-process App: Playwright's own threads would count as the App's.
Killed at the end: nothing is checked after the browser has closed.
"""

import re

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.panel_browser import check_page


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


def add_and_test_bucket(page, dialog, name: str, key: str, shot: str) -> None:
    """From a filled Add bucket dialog: "Check first" passes (screenshot `shot`), the bucket is added,
    its page's check runs and "Test an object" finds `key`."""
    dialog.get_by_role("button", name="Check first").click()
    dialog.get_by_text("Every step passed").wait_for()
    check_page(page, shot)
    dialog.get_by_role("button", name="Add bucket").click()
    page.get_by_role("heading", level=1, name=name).wait_for()
    page.get_by_role("button", name="Check", exact=True).click()
    page.get_by_test_id("steps").last.wait_for()
    page.get_by_label("Object key").fill(key)
    page.get_by_role("button", name="Fetch").click()
    page.get_by_text(re.compile(r"^Found: ")).wait_for()
