"""The rule editor's CORS and hotlink controls and the domain page's access lists and error pages, in a
real browser against the daemon: what is typed is stored as the API normalises it, an API refusal lands
beside its field, an edit shows the stored values; every page passes check_page (axe light and dark,
375 px, screenshots)."""

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, labelled, open_signed_in
from tests.panel_node import node, set_up  # noqa: F401  (node: the fixture)


def test_rule_cors_and_referers_and_the_domains_access_and_error_pages(browser, node):  # noqa: F811
    api = set_up(node)
    bucket = api.post("/api/buckets", {"name": "site", "type": "http", "url": "http://127.0.0.1:9/site"})
    assert bucket.status == 201, bucket.body

    context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/rules")
    page.get_by_role("heading", level=1, name="Rules").wait_for()
    page.get_by_role("button", name="Add rule").click()
    dialog = page.get_by_role("dialog")
    assert labelled(dialog, "Preflight methods").input_value() == "GET, HEAD"
    labelled(dialog, "CORS origins").fill("https://App.Example\nhttp://127.0.0.1:8080")
    labelled(dialog, "Preflight request headers").fill("X-Token")
    labelled(dialog, "Preflight max age (s)").fill("600")
    labelled(dialog, "Pages allowed to embed").fill("*.Partner.example")
    labelled(dialog, "Hotlink protection").check()
    labelled(dialog, "Allow requests without a Referer").uncheck()
    check_page(page, "rule-add-cors-referers")
    dialog.get_by_role("button", name="Add rule").click()
    page.get_by_text("Rule added").wait_for()
    rule = api.get("/api/rules").json["rules"][0]
    assert rule["cors"] == {"origins": ["https://app.example", "http://127.0.0.1:8080"], "methods": ["GET", "HEAD"],
                            "headers": ["x-token"], "max_age": 600}
    assert rule["referers"] == {"allow": ["*.partner.example"], "empty": False}

    page.get_by_role("button", name="Edit rule localhost/").click()
    dialog = page.get_by_role("dialog")
    assert labelled(dialog, "CORS origins").input_value() == "https://app.example\nhttp://127.0.0.1:8080"
    assert labelled(dialog, "Hotlink protection").is_checked()
    labelled(dialog, "CORS origins").fill("https://app.example/path")
    context.watch.expect_status(400, f"/api/rules/{rule['id']}")
    dialog.get_by_role("button", name="Save rule").click()
    dialog.locator(".field-error").filter(has_text="is an origin plus a path").wait_for()   # beside its field
    context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]   # the one provoked
    labelled(dialog, "CORS origins").fill("")
    labelled(dialog, "Hotlink protection").uncheck()
    dialog.get_by_role("button", name="Save rule").click()
    page.get_by_text("Rule saved").wait_for()
    rule = api.get(f"/api/rules/{rule['id']}").json
    assert rule["cors"] is None and rule["referers"] is None

    page.goto("/#/domains/localhost")
    card = page.locator("section, .card").filter(has=page.get_by_role("heading", name="Access and error pages")).first
    card.wait_for()
    labelled(card, "Denied addresses (CIDR)").fill("192.0.2.9/24")
    labelled(card, "Error pages").fill("404 errors/404.html\n600 errors/x.html")
    context.watch.expect_status(400, "/api/domains/localhost")
    card.get_by_role("button", name="Save access and error pages").click()
    card.locator(".field-error").filter(has_text="is neither an error status").wait_for()
    context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]
    assert api.get("/api/domains/localhost").json["error_pages"] is None      # nothing changed
    labelled(card, "Error pages").fill("404 errors/404.html\n5xx errors/5xx.html")
    card.get_by_role("button", name="Save access and error pages").click()
    page.get_by_text("Access and error pages saved").wait_for()
    domain = api.get("/api/domains/localhost").json
    assert domain["access"] == {"allow": [], "deny": ["192.0.2.0/24"]}
    assert domain["error_pages"] == {"404": "errors/404.html", "5xx": "errors/5xx.html"}
    card.get_by_text("404 → errors/404.html, 5xx → errors/5xx.html").wait_for()
    # the redirect card saves the same record: the next save here still carries the current revision
    page.get_by_role("button", name="Set redirect").wait_for()
    labelled(card, "Denied addresses (CIDR)").fill("")
    card.get_by_role("button", name="Save access and error pages").click()
    page.get_by_text("Access and error pages saved").nth(1).wait_for()
    assert api.get("/api/domains/localhost").json["access"] is None
    check_page(page, "domain-access-error-pages")
    context.close()
