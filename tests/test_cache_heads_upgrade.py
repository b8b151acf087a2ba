"""An entry file with appended head records (a 304's refresh, docs/ARCHITECTURE.md) met by the
previous build, which knows no records: the real daemon of the last commit of main before them
(taken with `git archive`, as tests/test_fleet_upgrade.py takes its previous build) starts on the
data dir this build refreshed an entry in. It must not serve a head it cannot read: it sees a file
longer than its header says, drops it as torn, and asks the origin anew; this build then takes
the cache back."""

import os

import pytest

from tests import previous_build
from tests.node import ROOT
from tests.origin_server import OriginServer
from tests.test_origin_cache import fetch, shared_site
from tests.test_origin_refresh import BODY, layout, only_entry, script

# The last commit of main before head records (this branch's base).
PREVIOUS = "017e3da"


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory):
    """The previous build's contentnode package as plain files (truly before head records)."""
    return previous_build.previous_tree(tmp_path_factory, PREVIOUS, os.path.join("core", "cache_refresh.py"))


def test_the_previous_build_drops_an_entry_with_head_records(node, admin, previous_tree):
    with OriginServer() as origin:
        shared_site(admin, origin)
        script(origin, "/o", "max-age=0", 1)
        assert fetch(node.public_port, "/o")[2] == BODY
        script(origin, "/o", "max-age=300", 2)
        assert fetch(node.public_port, "/o")[1]["x-rev"] == "2"
        refreshed = layout(only_entry(node))
        assert refreshed["heads"] == 1 and refreshed["size"] > refreshed["body_end"]
        node.stop()

        node.root = previous_tree
        node.start()
        script(origin, "/o", "max-age=300", 3)
        asked = len(origin.requests_for("/o"))
        status, headers, body = fetch(node.public_port, "/o")
        # not the first header's max-age=0 answer revalidated, nor a hit on it: a new fill
        assert (status, body, headers["x-rev"]) == (200, BODY, "3")
        assert "fwd=uri-miss" in headers["cache-status"]
        assert len(origin.requests_for("/o")) == asked + 1
        assert "if-none-match" not in origin.requests_for("/o")[-1].headers
        stored = layout(only_entry(node))
        assert stored["id"] != refreshed["id"] and stored["heads"] == 0 and stored["size"] == stored["body_end"]
        node.stop()

        node.root = ROOT   # and back: this build reads what the previous one stored
        node.start()
        status, headers, body = fetch(node.public_port, "/o")
        assert (status, body, headers["x-rev"]) == (200, BODY, "3") and "hit" in headers["cache-status"]
        assert len(origin.requests_for("/o")) == asked + 1
