"""The panel in a real browser against the real daemon and a real SeaweedFS bucket.

One journey end to end (issue 14): setup in the wizard, the domain localhost
added and checked, a bucket added and checked, a rule, the object fetched from
the public port, a purge, a viewer created; the viewer, in its own browser
context, sees no write control and no Users section; the admin enrols 2FA
with the manual key and a real TOTP code, logs out and logs in with the next
code. Before that, an API token made in My account (its secret read once from
the page) logs a script in over HTTP; a browser holding that token session is
offered no password, 2FA or token controls; the admin revokes the token on the
user page and it is refused (401). Every page passes check_page (no console error, no failed or foreign
request, the CSP on every answer, axe-core clean in light and dark, no
horizontal scrolling at 375 px, screenshots at 1280 and 375 px).
"""

import glob
import json
import os
import re
import time
import uuid

import pyotp
import pytest

from contentnode.api import ROUTES
from contentnode.http.errors import ApiError
from contentnode.http.router import RouteTable
from tests.node import ROOT, Node
from tests.panel_browser import (check_page, expect, labelled, new_context, open_signed_in, serious_violations,
                                 sign_in)
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

ADMIN, ADMIN_PASSWORD = "admin", "a long admin pass phrase 7"
VIEWER, VIEWER_PASSWORD = "vera", "a long viewer pass phrase 8"
OBJECT = b"hello from the origin bucket\n"
READ_ONLY_CONTROLS = {"1h", "24h", "7d", "Requests", "Bandwidth", "Errors",  # the dashboard chart's switches
                      "Refresh"}
RECORDED_API_CALLS = set()  # (method, path) seen in the browser; checked against the route table below


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    instance = Node(str(tmp_path_factory.mktemp("panel-journey"))).start()
    yield instance
    instance.kill()


def nav(page, name):
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()
    page.get_by_role("heading", level=1, name=name).wait_for()


def assert_steps_all_ok(page, names=None):
    """The last step list on the page shows `names` (or at least one step), each visible and passed."""
    steps = page.get_by_test_id("steps").last
    steps.wait_for()
    shown = steps.locator("li").evaluate_all("items => items.map(i => [i.dataset.step, i.className])")
    assert shown, "no steps shown"
    if names is not None:
        assert [name for name, _ in shown] == names, shown
    failed = [name for name, classes in shown if "ok" not in classes.split()]
    assert failed == [], f"steps not passed: {shown}"
    assert steps.locator("li").first.is_visible()


def test_the_checks_catch_what_they_must(browser, node):
    """The harness itself: a foreign request is blocked and recorded, the page's CSP refuses a
    foreign fetch, a console error and an error answer are recorded, and axe-core reports an
    image without a text alternative."""
    context = new_context(browser, node)
    page = context.new_page()
    page.goto("/")
    page.wait_for_load_state("networkidle")
    page.evaluate("""async () => {
        await fetch('http://192.0.2.1:9/x').catch(() => {});
        await fetch('/api/nope');
        console.error('boom');
        const img = document.createElement('img');
        img.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=';
        document.body.append(img);
    }""")
    other = context.new_page()
    with pytest.raises(Exception):
        other.goto("http://192.0.2.1:9/y")  # a navigation: the CSP does not govern it, the Watch does
    page.wait_for_timeout(200)
    problems = "\n".join(context.watch.problems)
    assert "request to another origin (blocked): http://192.0.2.1:9/y" in problems, problems
    assert "violates the following Content Security Policy directive: \"connect-src 'self'\"" in problems
    assert "error answer 404: GET" in problems and "console error: boom" in problems, problems
    assert "image-alt" in {v["id"] for v in serious_violations(page)}
    context.close()


def test_journey(browser, node, seaweed):  # noqa: F811
    started = time.monotonic()
    bucket = "panel-" + uuid.uuid4().hex[:10]
    seaweed.create_bucket(bucket)
    seaweed.put_object(bucket, "hello.txt", OBJECT, "text/plain")
    admin = new_context(browser, node)
    page = admin.new_page()

    # First run: the wizard.
    page.goto("/")
    page.get_by_role("button", name="Create account").wait_for()
    check_page(page, "setup")
    page.get_by_label("Username").fill(ADMIN)
    labelled(page, "Password").fill(ADMIN_PASSWORD)
    page.get_by_role("button", name="Create account").click()
    page.get_by_label("Node name").fill("edge-1")
    page.get_by_role("button", name="Continue").click()
    page.get_by_role("heading", level=1, name="You are all set").wait_for()
    check_page(page, "setup-done")
    assert node.client().get("/api/session").json["setup_required"] is False

    # Domain localhost: add, check, every step shown and passed.
    page.goto("/#/dashboard")
    page.get_by_role("heading", level=1, name="Dashboard").wait_for()
    check_page(page, "dashboard-empty")
    nav(page, "Domains")
    page.get_by_role("button", name="Add domain").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Host name").fill("localhost")
    dialog.get_by_role("button", name="Add domain").click()
    page.get_by_role("heading", level=1, name="localhost").wait_for()
    page.get_by_role("button", name="Check", exact=True).click()
    assert_steps_all_ok(page, ["resolve", "fetch", "proof"])
    check_page(page, "domain")

    # Bucket: add (SeaweedFS), then check it from its page.
    nav(page, "Buckets")
    page.get_by_role("button", name="Add bucket").click()
    dialog = page.get_by_role("dialog")
    definition = seaweed.bucket_definition(bucket)
    labelled(dialog, "Name").fill("origin")
    dialog.get_by_label("Endpoint").fill(definition["endpoint"])
    labelled(dialog, "Bucket").fill(bucket)
    dialog.get_by_label("Region").fill(definition["region"])
    dialog.get_by_label("Access key").fill(definition["access_key"])
    dialog.get_by_label("Secret key").fill(definition["secret_key"])
    dialog.get_by_role("button", name="Add bucket").click()
    page.get_by_role("heading", level=1, name="origin").wait_for()
    page.get_by_role("button", name="Check", exact=True).click()
    assert_steps_all_ok(page)
    check_page(page, "bucket")
    assert definition["secret_key"] not in page.content()

    # Rule: localhost / -> the bucket.
    nav(page, "Rules")
    page.get_by_role("button", name="Add rule").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Domain").select_option("localhost")
    dialog.get_by_label("Path").fill("/")
    dialog.get_by_label("Bucket").select_option(label="origin")
    dialog.get_by_role("button", name=re.compile("^(Add|Create|Save) rule$")).click()
    dialog.wait_for(state="hidden")
    page.get_by_role("cell", name="localhost").first.wait_for()
    check_page(page, "rules")

    # The object through the public port, twice from the cache, then purged from the panel.
    public = node.client("public", host="localhost")
    seaweed.reset_counts()
    for _ in range(2):
        got = public.get("/hello.txt")
        assert got.status == 200 and got.body == OBJECT, got.body[:200]
    assert seaweed.count("GET", contains=f"/{bucket}/hello.txt") == 1
    nav(page, "Cache")
    labelled(page, "URLs to purge").fill(f"http://localhost:{node.public_port}/hello.txt")
    page.get_by_role("button", name="Purge", exact=True).click()
    page.get_by_test_id("toasts").get_by_role("status").filter(has_text=re.compile("urged")).first.wait_for()
    books = page.get_by_test_id("cache-books")
    expect(books).to_contain_text("1 removed")        # the books, shown again after the purge
    expect(books).to_contain_text("1 hit · 1 miss")
    expect(page.get_by_role("table", name="Cache hits per process")).to_contain_text("Daemon")
    check_page(page, "cache")
    assert public.get("/hello.txt").body == OBJECT
    assert seaweed.count("GET", contains=f"/{bucket}/hello.txt") == 2, "the purge did not drop the cached copy"

    # A viewer.
    nav(page, "Users")
    page.get_by_role("button", name=re.compile("^(Add|Create) user$")).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Username").fill(VIEWER)
    labelled(dialog, "Password").fill(VIEWER_PASSWORD)
    dialog.get_by_label("Role").select_option("viewer")
    dialog.get_by_role("button", name=re.compile("^(Add|Create) user$")).click()
    dialog.wait_for(state="hidden")
    page.get_by_role("cell", name=VIEWER).first.wait_for()
    check_page(page, "users")

    # The viewer, in a second browser context: read-only views, no Users section.
    viewer = new_context(browser, node)
    vpage = viewer.new_page()
    vpage.goto("/")
    vpage.get_by_role("button", name="Sign in").wait_for()
    sign_in(vpage, VIEWER, VIEWER_PASSWORD)
    vpage.get_by_role("heading", level=1, name="Dashboard").wait_for()
    menu = vpage.get_by_role("navigation", name="Main")
    assert menu.get_by_role("link", name="Domains").is_visible()
    for absent in ("Users", "Security", "Activity log", "Backup", "Settings", "Notifications"):
        assert menu.get_by_role("link", name=absent, exact=True).count() == 0, absent
    for where, heading in (("#/domains", "Domains"), ("#/domains/localhost", "localhost"), ("#/buckets", "Buckets"),
                           ("#/rules", "Rules"), ("#/cache", "Cache"), ("#/dashboard", "Dashboard")):
        vpage.goto("/" + where)
        vpage.get_by_role("heading", level=1, name=heading).wait_for()
        vpage.wait_for_load_state("networkidle")
        buttons = {b.strip() for b in vpage.locator("main").get_by_role("button").all_inner_texts()}
        assert buttons <= READ_ONLY_CONTROLS, f"the viewer is offered {sorted(buttons - READ_ONLY_CONTROLS)} on {where}"
        assert vpage.locator("main form").count() == 0, f"the viewer is offered a form on {where}"
        check_page(vpage, "viewer-" + where.strip("#/").replace("/", "-"))
    vpage.goto("/#/users")
    vpage.get_by_text("You do not have access to this page").wait_for()
    RECORDED_API_CALLS.update(viewer.watch.api_calls)
    viewer.close()

    # Every other page of the admin's menu, and a user's page.
    page.get_by_role("link", name=VIEWER).first.click()
    page.get_by_role("heading", level=1, name=VIEWER).wait_for()
    check_page(page, "user")
    seen = {"Rules", "Cache", "Users"}
    for name in page.get_by_role("navigation", name="Main").get_by_role("link").all_inner_texts():
        name = name.strip()
        if name not in seen:
            nav(page, name)
            check_page(page, name.lower().replace(" ", "-"))

    # An API token for a script: made in My account, its secret read from the page once, used
    # by a script over HTTP; a browser holding that token session is offered no credential
    # controls; the admin sees it on the user page and revokes it.
    token_secret = create_token(page, admin)
    script = node.client()
    login = script.post("/api/login", {"token": token_secret})
    assert login.status == 200 and login.json["token"]["name"] == "nightly purge", login.body
    assert script.get("/api/rules").status == 200
    assert script.get("/api/users").status == 403  # only the token's scopes
    check_token_session(browser, node, script.cookies)
    page.reload()
    row = page.get_by_role("row").filter(has_text="nightly purge")
    row.wait_for()
    assert "never" not in row.locator("td[data-label='Last used']").inner_text(), row.inner_text()
    nav(page, "Users")
    page.get_by_role("link", name=ADMIN, exact=True).first.click()
    page.get_by_role("heading", level=1, name=ADMIN).wait_for()
    row = page.get_by_role("row").filter(has_text="nightly purge")
    row.wait_for()
    check_page(page, "user-tokens")
    row.get_by_role("button", name="Revoke token nightly purge").click()
    page.get_by_role("dialog").get_by_role("button", name="Revoke").click()
    row.wait_for(state="detached")
    assert script.get("/api/rules").status == 401  # its session ended with it
    refused = node.client().post("/api/login", {"token": token_secret})
    assert refused.status == 401 and refused.error_code == "bad_credentials", refused.body

    # The admin enrols 2FA from the manual key, logs out, logs in with the next code.
    nav(page, "My account")
    page.get_by_role("button", name="Set up two-factor authentication").click()
    dialog = page.get_by_role("dialog")
    labelled(dialog, "Password").fill(ADMIN_PASSWORD)  # changing 2FA needs the password (docs/API.md, "Two-factor authentication")
    dialog.get_by_role("button", name="Continue").click()
    secret = re.sub(r"\s", "", page.get_by_test_id("totp-secret").inner_text())
    totp = pyotp.TOTP(secret)
    page.get_by_label("Authentication code").fill(totp.now())
    page.get_by_role("button", name="Enable").click()
    page.get_by_test_id("recovery-codes").wait_for()
    assert len(page.get_by_test_id("recovery-codes").get_by_role("listitem").all()) == 10
    check_page(page, "account-recovery-codes")
    page.get_by_role("button", name="I have saved them").click()
    # the page redraws with 2FA on (four API reads); logging out amid them would answer them 401
    page.get_by_role("button", name="New recovery codes").wait_for()
    page.get_by_role("button", name="Log out", exact=True).click()
    page.get_by_role("button", name="Sign in").wait_for()
    check_page(page, "login")
    sign_in(page, ADMIN, ADMIN_PASSWORD)
    page.get_by_label("Authentication code").wait_for()
    check_page(page, "login-2fa")
    node.set_clock_offset(30)  # the code used to enable is spent: the next step's code
    page.get_by_label("Authentication code").fill(totp.at(time.time() + 30))
    page.get_by_role("button", name="Verify").click()
    page.get_by_role("heading", level=1, name="Dashboard").wait_for()
    me = page.evaluate("() => fetch('/api/me').then(r => r.json())")["user"]
    assert me["username"] == ADMIN and me["two_factor"] is True, me
    admin.watch.assert_clean("after the second login")
    RECORDED_API_CALLS.update(admin.watch.api_calls)
    admin.close()
    print(f"\njourney: {time.monotonic() - started:.1f} s")
    assert_recorded_calls_are_routes()




def create_token(page, context):
    """Make the token "nightly purge" in My account (first with a wrong password: the error lands
    beside the password field); returns the secret read from the page, gone once the dialog closes."""
    nav(page, "My account")
    page.get_by_role("button", name="New token").click()
    dialog = page.get_by_role("dialog")
    labelled(dialog, "Name").fill("nightly purge")
    dialog.get_by_label("routes:write", exact=True).check()
    assert dialog.get_by_label("routes:read (implied by write)").is_disabled()
    labelled(dialog, "Expires").select_option(label="In 30 days")
    password = labelled(dialog, "Your password")
    password.fill("not the password")
    context.watch.expect_status(400, "/api/me/tokens")
    dialog.get_by_role("button", name="Create token").click()
    page.locator(f"#{password.get_attribute('id')}-error").filter(has_text="password").wait_for()
    assert password.get_attribute("aria-invalid") == "true"
    # chromium logs every error answer on the console: the 400 provoked here is expected
    context.watch.problems = [p for p in context.watch.problems if "status of 400" not in p]
    password.fill(ADMIN_PASSWORD)
    dialog.get_by_role("button", name="Create token").click()
    secret = page.get_by_test_id("token-secret").inner_text().strip()
    assert re.fullmatch(r"cn_[A-Za-z0-9]+_[0-9a-f]{64}", secret), secret
    assert "shown only this once" in page.get_by_role("dialog").inner_text()
    assert secret in page.get_by_test_id("token-curl").inner_text()
    check_page(page, "account-token-secret")
    page.get_by_role("button", name="I have saved it").click()
    page.get_by_role("row").filter(has_text="nightly purge").wait_for()
    page.get_by_role("dialog").wait_for(state="detached")  # the dialog's close event runs a task later
    assert secret not in page.content()
    stored = page.evaluate("() => JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage), location.href])")
    assert secret not in stored
    check_page(page, "account-tokens")
    return secret


def check_token_session(browser, node, cookies):
    """A browser holding a token session's cookie: My account offers no password, 2FA or token controls."""
    context = new_context(browser, node)
    context.add_cookies([{"name": k, "value": v, "url": f"http://127.0.0.1:{node.admin_port}"} for k, v in cookies.items()])
    page = context.new_page()
    page.goto("/#/account")
    page.get_by_text('You are signed in with the API token "nightly purge"').wait_for()
    for absent in ("New token", "Change password", "Set up two-factor authentication"):
        assert page.get_by_role("button", name=absent).count() == 0, absent
    check_page(page, "account-token-session")
    RECORDED_API_CALLS.update(context.watch.api_calls)
    context.close()


# --- the panel calls only routes of the route table -------------------------

API_STRING = re.compile(r"""['"`](/api/[^'"`\s?#]*)""")
PLACEHOLDER = "x-param"


def api_paths_in_scripts() -> dict:
    """{path with each ${...} or trailing concatenation as PLACEHOLDER: [files]} from the panel's JS."""
    found = {}
    for path in glob.glob(os.path.join(ROOT, "contentnode", "panel", "js", "**", "*.js"), recursive=True):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for match in API_STRING.finditer(source):
            text = re.sub(r"\$\{[^}`]*\}", PLACEHOLDER, match.group(1)).split("${")[0]  # `${q ? `?..` : ''}`
            if text.endswith("/"):  # '/api/users/' + id
                text += PLACEHOLDER
            found.setdefault(text, []).append(os.path.relpath(path, ROOT))
    return found


def routed(table, method, path) -> bool:
    try:
        table.match(method, path)
    except ApiError as error:
        return error.status == 405 and method is None
    return True


def test_every_api_path_in_the_panel_scripts_is_a_route():
    table = RouteTable(ROUTES)
    paths = api_paths_in_scripts()
    assert len(paths) >= 20, sorted(paths)
    unknown = {p: files for p, files in paths.items() if not routed(table, None, p)}
    assert unknown == {}, f"the panel names API paths the route table does not have: {unknown}"


def assert_recorded_calls_are_routes():
    """Checked at the end of the journey (parallel runs give each test its own process)."""
    assert len(RECORDED_API_CALLS) >= 15, f"the journey recorded too few API calls: {sorted(RECORDED_API_CALLS)}"
    table = RouteTable(ROUTES)
    unknown = sorted(call for call in RECORDED_API_CALLS if not routed(table, *call))
    assert unknown == [], f"the panel called routes the route table does not have: {unknown}"


def test_a_stale_edit_form_says_reload_and_changes_nothing(browser, tmp_path):
    """The panel's edit forms send If-Match with the revision they were drawn from: a save made
    on a page someone else changed meanwhile is refused with a clear message, nothing changes."""
    other = Node(str(tmp_path)).start()  # its own node: the journey's module node is set up by the wizard
    try:
        api = other.client()
        assert api.post("/api/setup", {"username": ADMIN, "password": ADMIN_PASSWORD}).status == 201
        context, page = open_signed_in(browser, other, ADMIN, ADMIN_PASSWORD, "/#/security")
        threshold = labelled(page, "Failed attempts before lockout")
        threshold.wait_for()
        theirs = api.put("/api/policy", {"lockout_threshold": 7}).json["revision"]  # someone else
        assert theirs > 1
        context.watch.expect_status(412, "/api/policy")
        threshold.fill("9")
        page.get_by_role("button", name="Save policy").click()
        page.get_by_role("alert").filter(has_text="Someone else changed this since you opened it").wait_for()
        assert {k: api.get("/api/policy").json[k] for k in ("lockout_threshold", "revision")} == {
            "lockout_threshold": 7, "revision": theirs}
        page.reload()
        threshold.wait_for()
        assert threshold.input_value() == "7"
        threshold.fill("9")
        page.get_by_role("button", name="Save policy").click()
        page.get_by_text("Policy saved").wait_for()
        saved = api.get("/api/policy").json
        assert saved["lockout_threshold"] == 9 and saved["revision"] > theirs
        # chromium logs every error answer on the console: the one 412 provoked here is the only problem
        provoked = [p for p in context.watch.problems if "status of 412" in p and p.endswith("/api/policy")]
        assert len(provoked) == 1, context.watch.problems
        context.watch.problems.remove(provoked[0])
        context.watch.assert_clean("security page")
        context.close()
    finally:
        other.kill()


def test_the_restore_page_names_what_it_kept(browser, tmp_path):
    """Issue 25: a token revoked since the backup is named as kept revoked after a restore from the
    panel (and a link key made since as kept), and the option to bring the backup's credentials back is offered, off, for an encrypted file."""
    other = Node(str(tmp_path)).start()  # its own node: the journey's module node is set up by the wizard
    try:
        api = other.client()
        assert api.post("/api/setup", {"username": ADMIN, "password": ADMIN_PASSWORD}).status == 201
        made = api.post("/api/me/tokens", {"name": "leaked", "scopes": ["domains:read"], "password": ADMIN_PASSWORD})
        assert made.status == 201, made.body
        backup_file = tmp_path / "node.json"
        backup_file.write_text(json.dumps(api.post("/api/backup/export", {"passphrase": ADMIN_PASSWORD}).json))
        assert api.delete(f"/api/me/tokens/{made.json['token']['id']}").status == 204
        rotated = api.post("/api/links/rotate", {"grace_seconds": 0}).json["kid"]
        context, page = open_signed_in(browser, other, ADMIN, ADMIN_PASSWORD, "/#/backup")
        option = page.get_by_label("Bring back the backup's accounts and credentials as they were")
        page.get_by_label("Backup file").set_input_files(str(backup_file))
        option.wait_for()
        assert not option.is_checked()
        labelled(page, "Passphrase of the backup").fill(ADMIN_PASSWORD)
        page.get_by_role("button", name="Restore…").click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_text("Passwords, second factors, tokens, accounts, link keys, channel and bucket secrets and "
                           "certificates stay as they are now.").wait_for()
        dialog.get_by_role("button", name="Restore").click()
        page.get_by_text("The backup was restored.").wait_for()
        page.get_by_text("Tokens revoked since, still revoked").wait_for()
        page.get_by_text("leaked (admin)").wait_for()
        page.get_by_text("Link keys made since, kept").wait_for()
        page.get_by_text(rotated, exact=True).wait_for()
        check_page(page, "backup-restored")
        assert other.client().post("/api/login", {"token": made.json["secret"]}).error_code == "bad_credentials"
        context.close()
    finally:
        other.kill()


def test_a_token_session_is_offered_no_account_controls(browser, tmp_path):
    """Issue 25: a full-scope token session may read accounts, the policy and the backup page, but the
    API refuses it every account, credential, policy and restore change: the panel offers none."""
    other = Node(str(tmp_path)).start()
    try:
        api = other.client()
        assert api.post("/api/setup", {"username": ADMIN, "password": ADMIN_PASSWORD}).status == 201
        made = api.post("/api/me/tokens", {"name": "everything", "password": ADMIN_PASSWORD,
                                           "scopes": ["users:manage", "settings:write", "metrics:read"]})
        assert made.status == 201, made.body
        script = other.client()
        assert script.post("/api/login", {"token": made.json["secret"]}).status == 200
        context = new_context(browser, other)
        context.add_cookies([{"name": k, "value": v, "url": f"http://127.0.0.1:{other.admin_port}"}
                             for k, v in script.cookies.items()])
        page = context.new_page()
        page.goto("/#/users")
        page.get_by_text("You are signed in with an API token: accounts can be added or changed").wait_for()
        assert page.get_by_role("button", name="Add user").count() == 0
        check_page(page, "users-token-session")
        page.get_by_role("link", name=ADMIN, exact=True).first.click()
        page.get_by_role("heading", level=1, name=ADMIN).wait_for()
        for absent in ("Delete user", "Disable", "Save role", "End sessions", "Reset password"):
            assert page.get_by_role("button", name=absent).count() == 0, absent
        page.goto("/#/security")
        page.get_by_text("the policy can be changed only after").wait_for()
        assert page.get_by_role("button", name="Save policy").count() == 0
        page.goto("/#/backup")
        page.get_by_text("a backup can be restored only after").wait_for()
        page.goto("/#/account")
        page.get_by_text('You are signed in with the API token "everything"').wait_for()
        assert page.get_by_text("My sessions").count() == 0
        context.watch.assert_clean("token session pages")
        RECORDED_API_CALLS.update(context.watch.api_calls)
        context.close()
    finally:
        other.kill()
