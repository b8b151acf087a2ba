"""The panel's Fleet page in Debian's chromium: a standalone node (set up, join), the primary
(mint a join code, shown once with a copy button; the join codes with revoke; the nodes table) and a replica (where
edits are made); each checked by check_page (axe, dark mode, 375 px, clean network)."""

import time

from contentnode.fleet import members

from tests.fleet_setup import FleetNode, serving_fleet_fixture, wait_for
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, expect, new_context
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_panel_journey import sign_in


fleet = serving_fleet_fixture(replicas=1)


def open_fleet_page(browser, node):
    context = new_context(browser, node)
    page = context.new_page()
    page.goto("/#/fleet")
    sign_in(page, ADMIN_USER, ADMIN_PASSWORD)
    page.get_by_role("heading", level=1, name="Fleet").wait_for()
    return page


def test_standalone_fleet_page_offers_set_up_and_join(browser, tmp_path):
    node = FleetNode(str(tmp_path)).start()
    try:
        client = node.client()
        assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        page = open_fleet_page(browser, node)
        expect(page.get_by_role("button", name="Make this node the primary")).to_be_visible()
        expect(page.get_by_label("Join code")).to_be_visible()
        page.get_by_label("Join code").fill("cnj_not-a-code")
        page.context.watch.expect_status(400, "/api/fleet/join")
        page.get_by_role("button", name="Check what it replaces").click()
        expect(page.get_by_text("not a join code").or_(page.get_by_text("damaged")).first).to_be_visible()
        # chromium logs every error answer on the console: the 400 provoked here is expected
        page.context.watch.problems = [p for p in page.context.watch.problems if "status of 400" not in p]
        check_page(page, "fleet-standalone")
    finally:
        node.close()


def test_primary_mints_a_code_shown_once_and_lists_the_replica(browser, fleet):
    replica_id = fleet.replica_admins[0].get("/api/fleet").json["node_id"]
    wait_for(lambda: fleet.admin.get("/api/fleet").json["nodes"], 10, what="the replica listed")
    page = open_fleet_page(browser, fleet.primary)
    expect(page.get_by_role("table", name="Fleet nodes").get_by_text(replica_id)).to_be_visible()
    listed = next(n for n in fleet.admin.get("/api/fleet").json["nodes"] if n["node_id"] == replica_id)
    row = page.get_by_role("table", name="Fleet nodes").get_by_role("row").filter(has_text=replica_id)
    expect(row).to_contain_text(f"{listed['traffic']['requests']:,} requests")   # the node's traffic totals
    page.get_by_role("button", name="Mint join code").click()
    code = page.get_by_test_id("shown-once")
    expect(code).to_contain_text("cnj_")
    expect(page.get_by_role("button", name="Copy")).to_be_visible()
    check_page(page, "fleet-primary")


def _named_primary(fleet) -> str:
    """The primary named edge-0, and the replica knowing it (it reads the primary's status each poll)."""
    assert fleet.admin.put("/api/settings", {"node_name": "edge-0"}).status == 200
    wait_for(lambda: fleet.replica_admins[0].get("/api/fleet").json["primary"]["name"] == "edge-0",
             what="the replica reading the primary's name")
    return fleet.admin.get("/api/fleet").json["node_id"]


def test_replica_page_says_where_edits_are_made(browser, fleet):
    primary_id = _named_primary(fleet)
    page = open_fleet_page(browser, fleet.replicas[0])
    expect(page.get_by_text("This node is a replica")).to_be_visible()
    named = page.get_by_test_id("replica-primary")
    expect(named).to_contain_text("edge-0 at ")
    expect(named).to_contain_text(f":{fleet.primary.admin_port} (node {primary_id})")
    expect(page.get_by_role("button", name="Mint join code")).to_have_count(0)
    # never probed on this replica: it offers a probe, not a probe "again"
    assert fleet.replica_admins[0].get("/api/fleet").json["probe"] is None
    expect(page.get_by_role("button", name="Probe the bucket", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Probe the bucket again")).to_have_count(0)
    check_page(page, "fleet-replica")


def test_the_sign_in_page_names_the_node(browser, fleet):
    _named_primary(fleet)
    page = new_context(browser, fleet.primary).new_page()
    page.goto("/#/login")
    expect(page.get_by_test_id("node-name")).to_have_text("Node edge-0")
    assert page.title() == "Sign in · edge-0"
    replica = new_context(browser, fleet.replicas[0]).new_page()
    replica.goto("/#/login")
    expect(replica.get_by_test_id("node-name")).to_have_text("Node contentnode")
    check_page(page, "fleet-login-named")


def test_shared_pages_on_a_replica_say_where_edits_are_made_and_hide_write_controls(browser, fleet):
    primary_id = _named_primary(fleet)   # before the page loads: the shell reads the role once
    page = open_fleet_page(browser, fleet.replicas[0])
    for where, heading in (("#/domains", "Domains"), ("#/buckets", "Buckets"), ("#/rules", "Rules")):
        page.goto("/" + where)
        page.get_by_role("heading", level=1, name=heading).wait_for()
        expect(page.get_by_test_id("replica-banner")).to_contain_text("edge-0 at ")
        expect(page.get_by_test_id("replica-banner")).to_contain_text(f"(node {primary_id})")
    page.goto("/#/domains")
    page.get_by_role("heading", level=1, name="Domains").wait_for()
    expect(page.get_by_role("button", name="Add domain")).to_have_count(0)
    check_page(page, "fleet-replica-domains")
    on_primary = open_fleet_page(browser, fleet.primary)
    on_primary.goto("/#/domains")
    on_primary.get_by_role("heading", level=1, name="Domains").wait_for()
    expect(on_primary.get_by_role("button", name="Add domain")).to_be_visible()
    expect(on_primary.get_by_test_id("replica-banner")).to_have_count(0)


def test_primary_lists_join_codes_revokes_one_and_shows_unknown_statuses(browser, fleet):
    """The join codes table (created, expires, used by) with a revoke button; the count of statuses
    the primary ignored, shown only when there are some."""
    used_by = fleet.replica_admins[0].get("/api/fleet").json["node_id"]
    fleet.bucket_client().put_object("contentnode/nodes/00000000000000ff.json",
                                     b'{"node_id": "00000000000000ff", "mac": "AAAA"}', "application/json")
    wait_for(lambda: fleet.admin.get("/api/fleet").json["unknown_statuses"] == 1, 15,
             what="the primary counting the forged status")
    minted = fleet.admin.post("/api/fleet/join-codes", {}).json
    page = open_fleet_page(browser, fleet.primary)
    codes = page.get_by_role("table", name="Join codes")
    expect(codes.get_by_text(minted["id"])).to_be_visible()
    expect(codes.get_by_text(f"by node {used_by}")).to_be_visible()   # the replica's own code, used
    expect(page.get_by_test_id("unknown-statuses")).to_contain_text("1 unknown status")
    assert minted["code"] not in page.content()
    check_page(page, "fleet-join-codes")
    page.get_by_role("button", name=f"Revoke join code {minted['id']}").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke").click()
    expect(codes.get_by_text(minted["id"])).to_have_count(0)
    assert minted["id"] not in [c["id"] for c in fleet.admin.get("/api/fleet/join-codes").json["join_codes"]]
    fleet.bucket_client().delete_object("contentnode/nodes/00000000000000ff.json")


def test_primary_removes_a_node_after_a_confirm_dialog(browser, fleet):
    """Each node row has a Remove button; the dialog says what removal does; cancelling keeps the
    node, confirming takes it off the member list (gone from the table and from `nodes`)."""
    (node_id, keys), = fleet.add_members(1)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {"node_id": node_id, "name": "edge-7", "role": "replica", "version": "0", "seq": 1, "seen_at": now,
              "poll_seconds": 1}
    fleet.bucket_client().put_object(f"contentnode/nodes/{node_id}.json",
                                     members.Authority(keys, None, "status", {}, legacy=False).write(status),
                                     "application/json")
    wait_for(lambda: node_id in [r["node_id"] for r in fleet.admin.get("/api/fleet").json["nodes"]], 15,
             what="the primary listing the new member")
    page = open_fleet_page(browser, fleet.primary)
    nodes = page.get_by_role("table", name="Fleet nodes")
    expect(nodes.get_by_text(node_id)).to_be_visible()
    check_page(page, "fleet-nodes-remove")
    remove = page.get_by_role("button", name=f"Remove node {node_id} from the fleet")
    remove.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("sealing key is replaced")
    check_page(page, "fleet-remove-dialog")
    dialog.get_by_role("button", name="Cancel").click()
    assert node_id in [r["node_id"] for r in fleet.admin.get("/api/fleet").json["nodes"]]
    remove.click()
    page.get_by_role("dialog").get_by_role("button", name="Remove node").click()
    expect(nodes.get_by_text(node_id)).to_have_count(0)
    assert node_id not in [r["node_id"] for r in fleet.admin.get("/api/fleet").json["nodes"]]
    # the answer is the primary's list; the bundle naming the members is published right after it
    wait_for(lambda: node_id not in fleet.member_bundle()["parts"]["members"]["data"]["members"], 10,
             what="the bundle published without the removed node")
