"""The panel adds an http bucket in a real browser: the type's own fields (site URL, Host header policy,
TLS verification, timeouts), a guard refusal beside the URL, check first, the bucket page's check and
"Test an object", an edit of the Host header, then the site served through a rule."""

import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.origin_server import OriginServer
from tests.panel_browser import check_page, labelled, open_signed_in
from tests.panel_node import add_and_test_bucket, node, set_up  # noqa: F401  (node: the fixture)


def test_add_check_test_and_edit_an_http_bucket(browser, node):  # noqa: F811
    api = set_up(node)
    with OriginServer() as origin:
        origin.script("/shop/", b"<h1>shop</h1>", headers={"Content-Type": "text/html"})
        origin.script("/shop/hello.txt", b"hello from the site\n", headers={"Content-Type": "text/plain"}, etag='"h1"')

        context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/buckets")
        page.get_by_role("heading", level=1, name="Buckets").wait_for()
        page.get_by_role("button", name="Add bucket").click()
        dialog = page.get_by_role("dialog")
        assert not labelled(dialog, "Site URL").is_visible()
        dialog.get_by_label("Type").select_option("http")
        assert labelled(dialog, "Site URL").is_visible() and not dialog.get_by_label("Endpoint").is_visible()
        assert not labelled(dialog, "Host name").is_visible()
        dialog.get_by_label("Host header").select_option("name")
        assert labelled(dialog, "Host name").is_visible()
        dialog.get_by_label("Host header").select_option("origin")
        assert labelled(dialog, "Connect timeout (s)").input_value() == "5"
        assert labelled(dialog, "Read timeout (s)").input_value() == "30"
        labelled(dialog, "Name").fill("shop")
        labelled(dialog, "Site URL").fill("http://169.254.169.254/latest")   # refused: beside the field
        context.watch.expect_status(400, "/api/buckets")
        dialog.get_by_role("button", name="Add bucket").click()
        dialog.locator(".field-error").filter(has_text="link-local").wait_for()
        context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]
        labelled(dialog, "Site URL").fill(origin.url + "/shop/")
        add_and_test_bucket(page, dialog, "shop", "hello.txt", "bucket-add-http")
        check_page(page, "bucket-http")

        page.get_by_role("button", name="Edit").click()
        dialog = page.get_by_role("dialog")
        assert labelled(dialog, "Site URL").input_value() == origin.url + "/shop"
        assert dialog.get_by_label("Endpoint").count() == 0
        dialog.get_by_label("Host header").select_option("name")
        labelled(dialog, "Host name").fill("www.example.test")
        dialog.get_by_role("button", name="Save").click()
        page.get_by_text("www.example.test").wait_for()

        bucket = api.get("/api/buckets").json["buckets"][0]
        assert (bucket["type"], bucket["url"], bucket["host_header"]) == ("http", origin.url + "/shop", "www.example.test")
        assert (bucket["tls_verify"], bucket["connect_timeout"], bucket["read_timeout"]) == (True, 5, 30)
        assert bucket["last_check"] is None   # the Host header changed: the last check was of another setup
        assert api.post("/api/rules", {"domain": "localhost", "path": "/", "bucket": bucket["id"]}).status == 201
        assert node.client("public", host="localhost").get("/hello.txt").body == b"hello from the site\n"
        assert origin.requests_for("/shop/hello.txt")[-1].headers["host"] == "www.example.test"
        page.goto("/#/buckets")
        page.get_by_role("cell", name=re.compile("website or app")).wait_for()
        check_page(page, "buckets-with-http")
