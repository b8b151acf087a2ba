"""The Backup page's scheduled backups in a real browser: the schedule saved with a generated
passphrase shown once (and that passphrase really opens the stored backup), "Run now", the stored
list, and a restore from it behind a confirmation; checked for axe, dark mode and 375 px. `node` is
a daemon process (conftest's default): Playwright's threads run in this process."""

import json
import re
import uuid

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, labelled, open_signed_in
from tests.test_backup_schedule import open_sealed



def test_schedule_run_and_restore_from_the_backup_page(browser, node, seaweed):
    api = node.client()
    assert api.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    bucket = "panel-" + uuid.uuid4().hex[:10]
    seaweed.create_bucket(bucket)
    assert api.post("/api/buckets", seaweed.bucket_definition(bucket, name="media")).status == 201
    assert api.post("/api/domains", {"host": "kept.example.com"}).status == 201

    context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, "/#/backup")
    page.get_by_role("heading", level=1, name="Backup").wait_for()
    page.get_by_role("heading", name="Scheduled backups").wait_for()
    assert page.get_by_role("button", name="Run now").count() == 0  # no bucket yet
    check_page(page, "backup-schedule-empty")

    page.get_by_label("Frequency").select_option("daily")
    page.get_by_label("Hour (UTC)").select_option("4")
    page.get_by_label("Copy endpoint and keys from a bucket").select_option(label=f"media ({bucket})")
    labelled(page, "Key prefix of the backups").fill("panel/")
    assert page.get_by_label("Generate a passphrase").is_checked()
    page.get_by_role("button", name="Save schedule").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("heading", name="Backup passphrase generated").wait_for()
    passphrase = dialog.get_by_test_id("backup-passphrase").inner_text()
    assert len(passphrase) >= 32 and "outside this node" in dialog.inner_text()
    check_page(page, "backup-passphrase-shown")
    dialog.get_by_role("button", name="I have saved it").click()
    page.get_by_test_id("backup-passphrase").wait_for(state="detached")  # gone with its dialog
    page.get_by_text("Every day at 04:00 UTC").wait_for()

    page.get_by_role("button", name="Run now").click()
    page.get_by_role("status").filter(has_text="Backup stored").wait_for()
    row = page.get_by_role("cell", name="this node")
    row.wait_for()
    key = api.get("/api/backup/schedule").json["status"]["last_key"]
    assert key.startswith("panel/contentnode-") and page.get_by_text(key).is_visible()
    sealed = open_sealed(json.loads(seaweed.get_object(bucket, key)), passphrase)  # the passphrase shown opens it
    assert "kept.example.com" in sealed["data"]["domains"]
    check_page(page, "backup-schedule")

    assert api.delete("/api/domains/kept.example.com").status == 204
    page.get_by_role("button", name=re.compile("^Restore the backup made ")).click()
    dialog = page.get_by_role("dialog")
    assert "the backup schedule stays as it is" in dialog.inner_text()
    dialog.get_by_role("button", name="Restore", exact=True).click()
    page.get_by_text("The backup was restored.").wait_for()
    assert page.get_by_text(key).count() >= 2  # in the list and as "From the bucket"
    assert api.login(ADMIN_USER, ADMIN_PASSWORD).status == 200  # the restore ended every other session
    assert [d["host"] for d in api.get("/api/domains").json["domains"]] == ["kept.example.com"]
    context.close()
