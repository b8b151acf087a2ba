"""Drive the panel in Debian's chromium through Playwright, and watch everything it does.

Nothing here downloads a browser: chromium is /usr/bin/chromium (apt-get
install -y chromium); without it the fixture fails with one clear message.
A Watch blocks and records every request to an origin other than the node's,
and records console errors, page errors, failed requests, error answers, answers
without the panel's Content-Security-Policy, and the API calls made.
"""

import os
import re
from urllib.parse import urlsplit

import pytest

from tests.node import ROOT

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
AXE_PATH = os.path.join(ROOT, "tests", "vendor", "axe-core", "axe.min.js")
ARTIFACTS = os.path.join(ROOT, "tests", "artifacts", "panel")
WIDTHS = {"wide": (1280, 800), "phone": (375, 812)}
TOAST_MS = 7000 + 300 + 100  # contentnode/panel/js/toast.js: an error toast's time, its fade, a margin


def require_chromium() -> str:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: the panel tests drive Debian's chromium "
                    "(apt-get install -y chromium); nothing downloads a browser", pytrace=False)
    return CHROMIUM


@pytest.fixture(scope="session")
def browser():
    """One headless chromium for the session, defined once (tests/conftest.py imports it).

    A test module that imported it itself would get a fixture of its own, and a second
    sync_playwright() on the same worker fails ("Sync API inside the asyncio loop")."""
    executable = require_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[test]'", pytrace=False)
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, headless=True, args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            instance.close()


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class Watch:
    """Everything one browser context does that the panel must never do; see the module docstring.

    expect_status(...) names error answers a step provokes on purpose.
    """

    def __init__(self, context, origin: str):
        self.origin = origin
        self.problems = []
        self.api_calls = set()  # (method, path) the pages asked for
        self.expected = set()  # (status, path)
        self.muted = False  # while axe-core runs: its own inline styles trip the CSP, not the panel's
        context.route("**/*", self._route)
        context.on("console", self._console)
        context.on("weberror", lambda error: self.problems.append(f"page error: {error.error}"))
        context.on("requestfailed", self._failed)
        context.on("response", self._response)

    def _route(self, route):
        url = route.request.url
        if url.startswith(("data:", "blob:")) or origin_of(url) == self.origin:
            route.continue_()
        else:
            self.problems.append(f"request to another origin (blocked): {url}")
            route.abort()

    def _console(self, message):
        if message.type == "error" and not (self.muted and "Content Security Policy" in message.text):
            self.problems.append(f"console error: {message.text} at {message.location.get('url')}")

    def _failed(self, request):
        if origin_of(request.url) == self.origin:
            self.problems.append(f"request failed: {request.method} {request.url}: {request.failure}")

    def _response(self, response):
        if origin_of(response.url) != self.origin:
            return
        path = urlsplit(response.url).path
        if path.startswith("/api/"):
            self.api_calls.add((response.request.method, path))
        if response.headers.get("content-security-policy") != CSP:
            self.problems.append(f"answer without the panel's CSP: {response.url}")
        if response.status >= 400 and (response.status, path) not in self.expected:
            self.problems.append(f"error answer {response.status}: {response.request.method} {response.url}")

    def expect_status(self, status: int, path: str) -> None:
        self.expected.add((status, path))

    def assert_clean(self, where: str) -> None:
        problems, self.problems = self.problems, []
        self.expected.clear()
        assert problems == [], f"{where}: {problems}"


def new_context(browser, node, host="127.0.0.1", **options):
    """A context on the node's admin origin (under `host`), with a Watch (context.watch) and Playwright's clock."""
    origin = f"http://{host}:{node.admin_port}"
    context = browser.new_context(base_url=origin, viewport=dict(zip(("width", "height"), WIDTHS["wide"])),
                                  **options)
    context.set_default_timeout(15000)
    context.clock.install()  # time still flows as usual; check_page runs the toasts' timers out at once
    context.watch = Watch(context, origin)
    return context


with open(AXE_PATH, encoding="utf-8") as _f:
    AXE_SOURCE = _f.read()

_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
}"""


def serious_violations(page) -> list:
    """axe-core's serious and critical findings on the page as it is now.

    The source is evaluated through the DevTools protocol, which the page's CSP
    does not govern (a <script> tag would be refused, as it should be).
    """
    watch = page.context.watch
    watch.muted = True
    try:
        if not page.evaluate("() => typeof window.axe === 'object'"):
            page.evaluate(AXE_SOURCE)
        found = page.evaluate(_AXE_RUN)
        page.evaluate("() => new Promise(r => setTimeout(r, 20))")  # its console messages arrive first
    finally:
        watch.muted = False
    return found


def _background(page) -> str:
    return page.evaluate("() => getComputedStyle(document.body).backgroundColor")


def check_page(page, name: str) -> None:
    """The checks of docs/API.md, "Panel" (issue 14) for the page on screen: a clean watch, axe in light
    and dark at 1280 px (dark must really change the colours), no horizontal scrolling at
    375 px, screenshots at 1280 px (light, dark) and 375 px (light)."""
    page.wait_for_load_state("networkidle")
    # Toasts fade out on a timer; axe measuring one mid-fade reports its contrast. Let them go first:
    # the page's clock runs their timers out (the longest, an error's, is TOAST_MS) instead of a real wait.
    if page.locator(".toast").count():
        page.clock.run_for(TOAST_MS)
    page.wait_for_function("() => !document.querySelector('.toast')", timeout=10000)
    page.context.watch.assert_clean(name)
    os.makedirs(ARTIFACTS, exist_ok=True)
    found = {}
    backgrounds = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        backgrounds[scheme] = _background(page)
        found[scheme] = serious_violations(page)
        page.screenshot(path=os.path.join(ARTIFACTS, f"{name}-1280-{scheme}.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["phone"])))
    try:
        page.screenshot(path=os.path.join(ARTIFACTS, f"{name}-375-light.png"), full_page=True)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    finally:
        page.set_viewport_size(dict(zip(("width", "height"), WIDTHS["wide"])))
    assert backgrounds["light"] != backgrounds["dark"], f"{name}: dark mode changes nothing: {backgrounds}"
    serious = {k: v for k, v in found.items() if v}
    assert serious == {}, f"{name}: axe-core serious/critical violations: {serious}"
    assert overflow <= 0, f"{name}: the page is {overflow} px wider than a 375 px screen"
    page.context.watch.assert_clean(name + " (checks)")


def labelled(scope, label):
    """The control labelled exactly `label` (a required field's label ends in an aria-hidden " *")."""
    return scope.get_by_label(re.compile(rf"^{re.escape(label)}\s*\*?$"))


def expect(actual, *args, **kwargs):
    """Playwright's `expect`, its package imported at the first use, not when pytest collects a panel
    file: every xdist worker collects every file (~0.2 s of CPU each); the browser fixture says when the
    package is missing."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(actual, *args, **kwargs)


def sign_in(page, username, password):
    expect(page.get_by_label("Username")).to_be_focused()  # the login form opens ready to type
    page.get_by_label("Username").fill(username)
    labelled(page, "Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def open_signed_in(browser, node, username, password, route):
    """A new context and page, signed in on `node` and showing `route` (a #/ path)."""
    context = new_context(browser, node)
    page = context.new_page()
    page.goto("/")
    sign_in(page, username, password)
    page.get_by_role("navigation", name="Main").wait_for()
    page.goto(route)
    return context, page


def hash_path(page) -> str:
    return re.sub(r"^[^#]*#", "", page.url)
