"""The domains pages in a real browser: a domain never checked says it serves anyway and how to
check it (a `pending` status alone read as "not serving" to new users)."""

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, new_context
from tests.panel_node import node, set_up  # noqa: F401  (node: the fixture)
from tests.test_panel_journey import labelled


def test_a_never_checked_domain_says_it_serves_and_offers_the_check(browser, node):  # noqa: F811
    set_up(node, "files.example.test")
    context = new_context(browser, node)
    page = context.new_page()
    try:
        page.goto("/#/domains")
        page.get_by_label("Username").fill(ADMIN_USER)
        labelled(page, "Password").fill(ADMIN_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", level=1, name="Domains").wait_for()
        page.get_by_text("One domain was never checked (status pending).").wait_for()
        assert page.get_by_text("A domain serves its rules whatever its status").is_visible()
        check_page(page, "domains-unchecked")
        page.get_by_role("link", name="never: check now (files.example.test)").click()
        page.get_by_text("This domain already serves its rules").wait_for()
        assert page.get_by_role("button", name="Check").is_visible()
        check_page(page, "domain-unchecked")
    finally:
        context.close()
