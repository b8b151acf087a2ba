"""The panel adds a folder bucket in a real browser: the type choice, check first, the bucket page's
check and "Test an object" (its time shown from the answer's `ms`), then the file served."""

import os
import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, labelled, open_signed_in
from tests.panel_node import add_and_test_bucket, node, set_up  # noqa: F401  (node: the fixture)

TEXT = b"served from a folder, added in the panel\n"


def test_add_check_and_test_a_folder_bucket(browser, node):  # noqa: F811
    api = set_up(node)
    folder = os.path.join(node.data_dir, "sites", "www")
    os.makedirs(folder)
    with open(os.path.join(folder, "hello.txt"), "wb") as f:
        f.write(TEXT)

    context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/buckets")
    page.get_by_role("heading", level=1, name="Buckets").wait_for()
    page.get_by_role("button", name="Add bucket").click()
    dialog = page.get_by_role("dialog")
    assert dialog.get_by_label("Endpoint").is_visible() and not labelled(dialog, "Folder").is_visible()
    dialog.get_by_label("Type").select_option("folder")
    assert labelled(dialog, "Folder").is_visible() and not dialog.get_by_label("Endpoint").is_visible()
    assert os.path.join(node.data_dir, "sites") in dialog.inner_text()   # the hint names the node's roots
    labelled(dialog, "Name").fill("www")
    labelled(dialog, "Folder").fill(node.data_dir)   # outside the roots: the error lands beside the field
    context.watch.expect_status(400, "/api/buckets/check")
    dialog.get_by_role("button", name="Check first").click()
    error = dialog.locator(".field-error").filter(has_text="folder_roots")
    error.wait_for()
    # chromium logs every error answer on the console: the 400 provoked here is expected
    context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]
    labelled(dialog, "Folder").fill(folder)
    add_and_test_bucket(page, dialog, "www", "hello.txt", "bucket-add-folder")
    time_shown = page.locator("dd").filter(has_text=re.compile(r" ms$")).first.inner_text()
    assert re.fullmatch(r"\d+(\.\d+)? ms", time_shown), time_shown    # was "undefined ms"
    check_page(page, "bucket-folder")

    # Edit: the folder's own fields, no S3 ones; a rename is saved
    page.get_by_role("button", name="Edit").click()
    dialog = page.get_by_role("dialog")
    assert labelled(dialog, "Folder").input_value() == folder and dialog.get_by_label("Endpoint").count() == 0
    labelled(dialog, "Name").fill("www-site")
    dialog.get_by_role("button", name="Save").click()
    page.get_by_role("heading", level=1, name="www-site").wait_for()

    bucket = api.get("/api/buckets").json["buckets"][0]
    assert bucket["type"] == "folder" and bucket["path"] == folder and bucket["last_check"]["ok"] is True
    assert api.post("/api/rules", {"domain": "localhost", "path": "/", "bucket": bucket["id"]}).status == 201
    assert node.client("public", host="localhost").get("/hello.txt").body == TEXT
    page.goto("/#/buckets")
    page.get_by_role("cell", name=re.compile("folder on this node")).wait_for()
    check_page(page, "buckets-with-folder")
