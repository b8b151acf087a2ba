"""A rule's cache settings in the panel, in a real browser, against an http bucket: the dialog's default
choices name what an http bucket gives a new rule, the query policy {"only": [...]} with its names field,
the stale windows; the edit of a stored rule; then the shared cache's decision on the Troubleshoot page
(stored, freshness left, validators, the Cache-Status a GET gets now, the decision on the origin's answer) after the site's answer was stored, and why a warmed answer was not
stored (its Cache-Status on the Cache page)."""

import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.origin_server import OriginServer
from tests.panel_browser import check_page, labelled, open_signed_in
from tests.panel_node import node, set_up  # noqa: F401  (node: the fixture)


def test_rule_cache_settings_and_the_shared_cache_decision(browser, node):  # noqa: F811
    api = set_up(node)
    with OriginServer() as origin:
        origin.script("/site/page.html", b"<h1>page</h1>", etag='"p1"',
                      headers={"Content-Type": "text/html", "Cache-Control": "max-age=600"})
        assert api.post("/api/buckets", {"name": "site", "type": "http", "url": origin.url + "/site"}).status == 201

        context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/rules")
        page.get_by_role("heading", level=1, name="Rules").wait_for()
        page.get_by_role("button", name="Add rule").click()
        dialog = page.get_by_role("dialog")
        mode = labelled(dialog, "Cache mode")
        assert mode.input_value() == ""   # left to the API: the bucket's type decides
        assert "Default: origin (http bucket)" == mode.locator("option").first.inner_text()
        assert "Default: include (http bucket)" == labelled(dialog, "Query string").locator("option").first.inner_text()
        assert "Default: all (http bucket)" == labelled(dialog, "Methods").locator("option").first.inner_text()
        assert labelled(dialog, "Largest forwarded body (bytes)").input_value() == "10485760"
        assert not labelled(dialog, "Query parameters kept").is_visible()
        labelled(dialog, "Query string").select_option("only")
        labelled(dialog, "Query parameters kept").fill("page, lang, page")
        labelled(dialog, "Stale if error (s)").fill("30")
        check_page(page, "rule-add-cache")
        dialog.get_by_role("button", name="Add rule").click()
        page.get_by_role("cell", name=re.compile("origin's headers")).wait_for()
        check_page(page, "rules-origin-mode")

        rule = api.get("/api/rules").json["rules"][0]
        assert (rule["cache_mode"], rule["methods"], rule["query"]) == ("origin", "all", {"only": ["lang", "page"]})
        assert (rule["stale_if_error"], rule["stale_while_revalidate"], rule["max_body"]) == (30, 0, 10485760)

        page.get_by_role("button", name="Edit rule localhost/").click()
        dialog = page.get_by_role("dialog")
        assert labelled(dialog, "Cache mode").input_value() == "origin"
        assert labelled(dialog, "Query parameters kept").input_value() == "lang, page"
        labelled(dialog, "Methods").select_option("read")
        labelled(dialog, "Stale while revalidate (s)").fill("15")
        dialog.get_by_role("button", name="Save rule").click()
        page.get_by_text("Rule saved").wait_for()
        rule = api.get(f"/api/rules/{rule['id']}").json
        assert (rule["methods"], rule["stale_while_revalidate"], rule["query"]) == ("read", 15, {"only": ["lang", "page"]})

        first = node.client("public", host="localhost").get("/page.html?lang=en&x=1")
        assert first.status == 200 and "stored" in first.headers["cache-status"]
        page.goto("/#/troubleshoot")
        labelled(page, "URL to probe").fill("http://localhost/page.html?lang=en")
        page.get_by_role("button", name="Probe").click()
        page.get_by_text(re.compile(r"^shared cache \(origin mode\): stored .* status 200")).wait_for()
        page.get_by_text(re.compile(r"^10 min from max-age")).wait_for()
        assert page.get_by_text(re.compile(r"^fresh for \d+")).is_visible()
        assert page.locator("code", has_text='"p1"').is_visible()
        assert page.locator("code", has_text=re.compile(r"^contentnode; hit; ttl=\d+$")).is_visible()   # Cache-Status now
        assert page.get_by_text(re.compile(r"· fresh for 10 min from max-age$")).is_visible()   # the decision
        labelled(page, "URL to diagnose").fill("http://localhost/page.html?lang=de")   # another query: not stored
        page.get_by_role("button", name="Diagnose").click()
        page.get_by_text("not stored: the next request asks the origin").wait_for()
        check_page(page, "troubleshoot-shared-cache")

        origin.script("/site/secret.html", b"<h1>mine</h1>", headers={"Content-Type": "text/html", "Cache-Control": "no-store"})
        page.goto("/#/cache")
        labelled(page, "URLs to warm").fill("http://localhost/secret.html")
        page.get_by_role("button", name="Warm", exact=True).click()
        page.get_by_text('contentnode; fwd=uri-miss; fwd-status=200; detail="no-store"').wait_for()   # why: not stored
        check_page(page, "cache-warm-not-stored")
        assert [s.method for s in origin.requests_for("/site/page.html?lang=en") if s.method == "GET"] == ["GET"]
