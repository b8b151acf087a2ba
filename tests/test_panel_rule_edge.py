"""A rule's edge controls in the panel, in a real browser: access (networks, a country list on a
node with a country database), rate_limit and headers saved through the rule editor and read
back through the API, each API refusal shown at its control, the edit of the stored rule; and
on a node without a database the editor says what it lacks instead of offering countries."""

import os
import re

import pytest

from tests.geo_db import write_country_db
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.panel_browser import check_page, labelled, open_signed_in


def started(tmp_path, name, env=None):
    (tmp_path / name).mkdir()
    node = Node(str(tmp_path / name), env=env).start()
    api = node.client()
    assert api.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    assert api.post("/api/domains", {"host": "localhost"}).status == 201
    site = os.path.join(node.data_dir, "sites", "a")
    os.makedirs(site)
    made = api.post("/api/buckets", {"name": "site", "type": "folder", "path": site})
    assert made.status == 201, made.body
    return node, api


@pytest.fixture
def geo_node(tmp_path):
    node, api = started(tmp_path, "geo", {"CONTENTNODE_GEOIP_DB": write_country_db(tmp_path / "countries.mmdb")})
    yield node, api
    node.kill()


def refused_at(dialog, label, message):
    """The API's refusal is shown beside the control labelled `label`, which is marked invalid."""
    control = labelled(dialog, label)
    dialog.get_by_text(re.compile(message)).wait_for()
    assert control.get_attribute("aria-invalid") == "true"
    described = control.get_attribute("aria-describedby").split()
    assert any(re.search(message, dialog.locator(f"#{d}").inner_text() or "") for d in described), described


def test_edge_controls_save_through_the_rule_editor_and_read_back(browser, geo_node, tmp_path):
    node, api = geo_node
    context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/rules")
    page.get_by_role("heading", level=1, name="Rules").wait_for()
    page.get_by_role("button", name="Add rule").click()
    dialog = page.get_by_role("dialog")
    labelled(dialog, "Allowed networks").fill("10.1.2.3/8\n2001:db8::/32")
    labelled(dialog, "Denied networks").fill("10.9.0.0/16")
    assert not labelled(dialog, "Country codes").is_visible()
    labelled(dialog, "Countries").select_option("deny")
    labelled(dialog, "Country codes").fill("fr, DEU")
    labelled(dialog, "Requests a second per client").fill("5")
    labelled(dialog, "Header 1 name").fill("Content-Length")
    labelled(dialog, "Header 1 value").fill("1")
    context.watch.expect_status(400, "/api/rules")   # three refusals on purpose, each shown at its control
    dialog.get_by_role("button", name="Add rule").click()
    refused_at(dialog, "Burst", "burst")
    labelled(dialog, "Burst").fill("10")
    dialog.get_by_role("button", name="Add rule").click()
    refused_at(dialog, "Country codes", "not a two-letter country code")
    labelled(dialog, "Country codes").fill("fr, us")
    dialog.get_by_role("button", name="Add rule").click()
    refused_at(dialog, "Header 1 name", "may not set Content-Length")
    labelled(dialog, "Header 1 name").fill("X-Frame-Options")
    labelled(dialog, "Header 1 value").fill("DENY")
    dialog.get_by_role("button", name="Add header").click()
    labelled(dialog, "Header 2 name").fill("X-Test")
    labelled(dialog, "Header 2 value").fill("yes")
    assert api.get("/api/rules").json["rules"] == []          # every refusal changed nothing
    context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]   # the browser's console lines of those three
    dialog.get_by_role("button", name="Add header").scroll_into_view_if_needed()
    check_page(page, "rule-edge-add")
    dialog.get_by_role("button", name="Add rule").click()
    page.get_by_text("Rule added").wait_for()

    rule = api.get("/api/rules").json["rules"][0]
    assert rule["access"] == {"allow": ["10.0.0.0/8", "2001:db8::/32"], "deny": ["10.9.0.0/16"],
                              "countries": {"deny": ["FR", "US"]}}
    assert rule["rate_limit"] == {"rate": 5, "burst": 10}
    assert rule["headers"] == {"X-Frame-Options": "DENY", "X-Test": "yes"}

    page.get_by_role("button", name="Edit rule localhost/").click()
    dialog = page.get_by_role("dialog")
    assert labelled(dialog, "Allowed networks").input_value() == "10.0.0.0/8\n2001:db8::/32"
    assert labelled(dialog, "Countries").input_value() == "deny"
    assert labelled(dialog, "Country codes").input_value() == "FR, US"
    assert labelled(dialog, "Burst").input_value() == "10"
    assert labelled(dialog, "Header 2 value").input_value() == "yes"
    labelled(dialog, "Countries").select_option("")
    labelled(dialog, "Denied networks").fill("")
    labelled(dialog, "Requests a second per client").fill("")
    labelled(dialog, "Burst").fill("")
    dialog.get_by_role("button", name="Remove header 2").click()
    dialog.get_by_role("button", name="Save rule").click()
    page.get_by_text("Rule saved").wait_for()
    rule = api.get(f"/api/rules/{rule['id']}").json
    assert rule["access"] == {"allow": ["10.0.0.0/8", "2001:db8::/32"], "deny": []}
    assert rule["rate_limit"] is None and rule["headers"] == {"X-Frame-Options": "DENY"}
    context.close()


def test_without_a_country_database_the_editor_says_what_is_missing(browser, tmp_path):
    node, api = started(tmp_path, "plain")
    try:
        context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/rules")
        page.get_by_role("heading", level=1, name="Rules").wait_for()
        page.get_by_role("button", name="Add rule").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_text("Country lists need a country database; this node lacks the geoip_db start-up value.").wait_for()
        assert dialog.get_by_label("Countries").count() == 0
        labelled(dialog, "Denied networks").fill("192.0.2.0/24")
        check_page(page, "rule-edge-no-countries")
        dialog.get_by_role("button", name="Add rule").click()
        page.get_by_text("Rule added").wait_for()
        rule = api.get("/api/rules").json["rules"][0]
        assert (rule["access"], rule["rate_limit"], rule["headers"]) == ({"allow": [], "deny": ["192.0.2.0/24"]}, None, None)
        context.close()
    finally:
        node.kill()
