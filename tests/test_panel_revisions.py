"""The panel's edit forms send If-Match with the revision they were drawn from: a
save made on a page someone else changed meanwhile is refused with a clear
message, and nothing changes (Playwright, Debian's chromium, the real daemon)."""

import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import browser, new_context  # noqa: F401  (session fixture)

STALE = "Someone else changed this since you opened it"


def test_a_stale_form_says_reload_and_changes_nothing(browser, node, admin):  # noqa: F811
    context = new_context(browser, node)
    page = context.new_page()
    page.goto("/")
    page.get_by_label("Username").fill(ADMIN_USER)
    page.get_by_label(re.compile(r"^Password\s*\*?$")).fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Main").wait_for()
    page.goto("/#/security")
    threshold = page.get_by_label(re.compile(r"^Failed attempts before lockout\s*\*?$"))
    threshold.wait_for()

    assert admin.put("/api/policy", {"lockout_threshold": 7}).json["revision"] == 2  # someone else
    context.watch.expect_status(412, "/api/policy")
    threshold.fill("9")
    page.get_by_role("button", name="Save policy").click()
    page.get_by_role("alert").filter(has_text=STALE).wait_for()
    policy = admin.get("/api/policy").json
    assert policy["lockout_threshold"] == 7 and policy["revision"] == 2

    page.reload()
    threshold.wait_for()
    assert threshold.input_value() == "7"
    threshold.fill("9")
    page.get_by_role("button", name="Save policy").click()
    page.get_by_text("Policy saved").wait_for()
    policy = admin.get("/api/policy").json
    assert policy["lockout_threshold"] == 9 and policy["revision"] == 3
    # chromium logs every error answer on the console; the one 412 provoked here is the only problem
    provoked = [p for p in context.watch.problems if "status of 412" in p and p.endswith("/api/policy")]
    assert len(provoked) == 1, context.watch.problems
    context.watch.problems.remove(provoked[0])
    context.watch.assert_clean("security page")
    context.close()
