"""The panel's restore (issue 25, item 2): a token revoked since the backup is named as kept
revoked, and the option to bring the backup's credentials back is offered for encrypted backups."""

import json

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import browser, check_page, new_context  # noqa: F401  (session fixture)
from tests.test_panel_journey import labelled, sign_in

# a daemon node: Playwright's own threads would count as threads an in-process node left behind

PASSPHRASE = "a long backup passphrase"


def test_the_restore_page_names_what_it_kept(browser, admin, node, tmp_path):  # noqa: F811
    made = admin.post("/api/me/tokens", {"name": "leaked", "scopes": ["domains:read"], "password": ADMIN_PASSWORD})
    assert made.status == 201, made.body
    backup_file = tmp_path / "node.json"
    backup_file.write_text(json.dumps(admin.post("/api/backup/export", {"passphrase": PASSPHRASE}).json))
    assert admin.delete(f"/api/me/tokens/{made.json['token']['id']}").status == 204

    context = new_context(browser, node)
    page = context.new_page()
    page.goto("/")
    sign_in(page, ADMIN_USER, ADMIN_PASSWORD)
    page.get_by_role("navigation", name="Main").wait_for()
    page.goto("/#/backup")
    option = page.get_by_label("Bring back the backup's accounts and credentials as they were")
    page.get_by_label("Backup file").set_input_files(str(backup_file))
    option.wait_for()
    assert not option.is_checked()
    labelled(page, "Passphrase of the backup").fill(PASSPHRASE)
    page.get_by_role("button", name="Restore…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Passwords, second factors, tokens and accounts stay as they are now.").wait_for()
    dialog.get_by_role("button", name="Restore").click()
    page.get_by_text("The backup was restored.").wait_for()
    page.get_by_text("Tokens revoked since, still revoked").wait_for()
    page.get_by_text("leaked (admin)").wait_for()
    check_page(page, "backup-restored")
    assert node.client().post("/api/login", {"token": made.json["secret"]}).error_code == "bad_credentials"
    context.close()
