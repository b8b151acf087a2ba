"""The Fleet page's issuer, key and promotion controls in Debian's chromium: the primary
shows who orders certificates and the probe's checks (and runs it again) and rotates its
key through a dialog; a replica refuses a wrong recovery secret beside the field, then
is promoted and shows the next secret once. Each state checked by check_page (axe, dark
mode, 375 px, clean network)."""

from tests.fleet_setup import wait_for
from tests.panel_browser import check_page, expect
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_fleet_panel import fleet, open_fleet_page  # noqa: F401  (fleet: a module fixture, this module's own)


def test_primary_shows_the_issuer_probes_again_and_rotates(browser, fleet):
    page = open_fleet_page(browser, fleet.primary)
    issuer = page.get_by_role("region", name="Certificates and the issuer").or_(
        page.locator("section", has_text="Certificates and the issuer")).first
    expect(issuer.get_by_text("lease", exact=True)).to_be_visible()
    expect(page.get_by_role("list", name="Probe checks").get_by_text("race")).to_be_visible()
    page.get_by_role("button", name="Probe the bucket again").click()
    expect(page.get_by_text("The bucket honours conditional writes")).to_be_visible()
    check_page(page, "fleet-issuer-primary")

    epoch = fleet.admin.get("/api/fleet").json["key_epoch"]
    page.get_by_role("button", name="Rotate signing key").click()
    page.get_by_role("dialog").get_by_role("button", name="Rotate").click()
    expect(page.get_by_text(f"key epoch {epoch + 1}").first).to_be_visible()
    assert fleet.admin.get("/api/fleet").json["key_epoch"] == epoch + 1
    wait_for(lambda: fleet.replica_admins[0].get("/api/fleet").json["key_epoch"] == epoch + 1,
             what="the replica following the rotation")


def test_replica_refuses_a_wrong_secret_then_is_promoted(browser, fleet):
    page = open_fleet_page(browser, fleet.replicas[0])
    expect(page.get_by_text("This node answers the CA's HTTP-01 requests from the bucket", exact=False)).to_be_visible()
    secret_field = page.get_by_label("Recovery secret")
    secret_field.fill("cnr_" + "A" * 43)
    page.context.watch.expect_status(403, "/api/fleet/promote")
    page.get_by_role("button", name="Promote this node").click()
    page.get_by_role("dialog").get_by_role("button", name="Promote").click()
    expect(page.get_by_text("not the fleet's recovery secret")).to_be_visible()
    page.context.watch.problems = [p for p in page.context.watch.problems if "status of 403" not in p]
    check_page(page, "fleet-promote-replica")

    fleet.primary.kill()
    secret_field.fill(fleet.init_answer["recovery_secret"])
    page.get_by_role("button", name="Promote this node").click()
    page.get_by_role("dialog").get_by_role("button", name="Promote").click()
    shown = page.get_by_test_id("shown-once")
    expect(shown).to_contain_text("cnr_")
    assert shown.inner_text() != fleet.init_answer["recovery_secret"]
    assert secret_field.input_value() == ""  # the old secret does not stay in the form
    check_page(page, "fleet-promoted")
    page.get_by_role("button", name="Done").click()
    expect(page.get_by_role("button", name="Mint join code")).to_be_visible()
