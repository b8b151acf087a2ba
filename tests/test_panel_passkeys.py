"""Passkeys in the panel, in chromium with its virtual authenticator (the DevTools WebAuthn domain):
add one in My account, turn on passwordless sign-in on the Security page, log out, sign in with the
passkey alone, then with the password and the passkey as the second factor. Once with chromium's own
JSON conversions (parse...FromJSON, toJSON), once with them taken away, as in older browsers, so the
panel's own conversion carries the same journey."""

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, labelled, new_context


def virtual_authenticator(context, page):
    """A platform authenticator with resident keys and user verification, as a phone or laptop has."""
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable")
    made = cdp.send("WebAuthn.addVirtualAuthenticator", {"options": {
        "protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
        "isUserVerified": True, "automaticPresenceSimulation": True}})
    return cdp, made["authenticatorId"]


def log_out(page):
    page.get_by_role("button", name="Log out").click()
    page.get_by_role("heading", level=1, name="Sign in").wait_for()


WITHOUT_JSON_FORMS = """if (typeof PublicKeyCredential === 'function') {
  delete PublicKeyCredential.parseCreationOptionsFromJSON;
  delete PublicKeyCredential.parseRequestOptionsFromJSON;
  delete PublicKeyCredential.prototype.toJSON;
}"""


@pytest.mark.parametrize("json_forms", ["chromium", "panel"])
def test_add_a_passkey_and_sign_in_with_it(browser, node, json_forms):
    api = node.client()
    assert api.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    context = new_context(browser, node, host="localhost")  # a relying party id must be a name
    if json_forms == "panel":
        context.add_init_script(WITHOUT_JSON_FORMS)
    page = context.new_page()
    cdp, authenticator = virtual_authenticator(context, page)
    page.goto("/")
    native = page.evaluate("() => typeof PublicKeyCredential.parseCreationOptionsFromJSON === 'function'")
    assert native == (json_forms == "chromium")
    screens = check_page if json_forms == "chromium" else (lambda page, name: None)
    page.get_by_label("Username").fill(ADMIN_USER)
    labelled(page, "Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.get_by_role("navigation", name="Main").wait_for()

    page.goto("/#/account")
    page.get_by_role("button", name="Add a passkey").click()
    dialog = page.get_by_role("dialog")
    labelled(dialog, "Name").fill("virtual laptop")
    labelled(dialog, "Your password").fill(ADMIN_PASSWORD)
    dialog.get_by_role("button", name="Continue").click()
    row = page.get_by_role("row").filter(has_text="virtual laptop")
    row.wait_for()
    assert "never" in row.inner_text()  # not used yet
    assert len(cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})["credentials"]) == 1
    screens(page, "account-passkeys")

    page.goto("/#/security")
    page.get_by_label("What passkeys may do").select_option("passwordless")
    page.get_by_role("button", name="Save policy").click()
    page.get_by_text("Policy saved").wait_for()
    screens(page, "security-passkeys")
    log_out(page)

    page.get_by_role("button", name="Sign in with a passkey").wait_for()
    screens(page, "login-passkey")
    page.get_by_role("button", name="Sign in with a passkey").click()
    page.get_by_role("navigation", name="Main").wait_for()
    page.goto("/#/account")
    assert "never" not in page.get_by_role("row").filter(has_text="virtual laptop").inner_text()
    log_out(page)

    page.get_by_label("Username").fill(ADMIN_USER)
    labelled(page, "Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.get_by_role("heading", level=1, name="Two-factor authentication").wait_for()
    assert page.get_by_label("Authentication code").count() == 0  # no TOTP app: only the passkey is offered
    screens(page, "login-second-factor-passkey")
    page.get_by_role("button", name="Use a passkey").click()
    page.get_by_role("navigation", name="Main").wait_for()
    signed_in = [c for c in context.cookies() if c["name"] == "cn_session"]
    assert signed_in, "the passkey second factor left no session cookie"
    context.watch.assert_clean("passkey journey")
    context.close()
