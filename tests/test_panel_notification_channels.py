"""The notifications page in a real browser: the webhook (the secret the node
makes shown once, then a test send the receiver verifies with it) and ntfy
(server, topic, token, a test send), on a phone and in dark mode. A daemon
node: Playwright's own threads would count as the in-process node's."""

import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, new_context
from tests.peers.webhook import NtfyReceiver, WebhookReceiver

NTFY_TOKEN = "tk_" + "p" * 29


def card(page, title):
    return page.locator("section.card").filter(has=page.get_by_role("heading", level=2, name=title, exact=True))


def test_webhook_and_ntfy_from_the_panel(browser, node, admin):
    with WebhookReceiver("not-known-until-the-node-shows-it") as hook, NtfyReceiver(token=NTFY_TOKEN) as ntfy:
        context = new_context(browser, node)
        page = context.new_page()
        page.goto("/")
        page.get_by_label("Username").fill(ADMIN_USER)
        page.get_by_label(re.compile(r"^Password")).fill(ADMIN_PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("heading", level=1, name="Dashboard").wait_for()
        page.goto("/#/notifications")
        page.get_by_role("heading", level=1, name="Notifications").wait_for()

        webhook = card(page, "Webhook")
        webhook.get_by_label("URL").fill(hook.url + "/in")
        webhook.get_by_label("Send notifications to a webhook").check()
        webhook.get_by_role("button", name="Save Webhook").click()
        dialog = page.get_by_role("dialog", name="Webhook signing secret")
        shown = dialog.get_by_test_id("webhook-secret").inner_text()
        assert len(shown) >= 40
        check_page(page, "notifications-webhook-secret")
        dialog.get_by_role("button", name="I have saved it").click()
        hook.secret = shown
        dialog.wait_for(state="detached")  # the dialog's close event runs a task later
        webhook.get_by_text("secret set").wait_for()
        assert shown not in page.content()  # shown once: gone with the dialog
        webhook.get_by_role("button", name="Send a test").click()
        webhook.get_by_text("Delivered: HTTP 200 OK").wait_for()
        assert hook.deliveries[0]["refused"] is None and hook.deliveries[0]["json"]["event"] == "test"

        box = card(page, "ntfy")
        box.get_by_label("Server").fill(ntfy.url)
        box.get_by_label("Topic").fill("edge-alerts")
        box.get_by_label("Access token").fill(NTFY_TOKEN)
        box.get_by_label("Send notifications to ntfy").check()
        box.get_by_role("button", name="Save ntfy").click()
        box.get_by_text("token set").wait_for()
        box.get_by_role("button", name="Send a test").click()
        box.get_by_text("Delivered: sent (id msg1)").wait_for()
        assert ntfy.deliveries[0]["path"] == "/edge-alerts"
        assert ntfy.deliveries[0]["authorization"] == f"Bearer {NTFY_TOKEN}"
        check_page(page, "notifications-channels")
        context.close()
    saved = admin.get("/api/notifications").json
    assert saved["webhook"] == {"enabled": True, "url": hook.url + "/in", "secret_set": True}
    assert saved["ntfy"] == {"enabled": True, "server": ntfy.url, "topic": "edge-alerts", "token_set": True}
