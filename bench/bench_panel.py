"""The panel's first load (issue 14): bytes transferred for `/` and time to a usable login form.

Targets: the first load of `/` (every file the login page loads) <= 200 KB
uncompressed; the login form usable <= 300 ms after navigation starts, on
loopback. Drives Debian's chromium (/usr/bin/chromium) through Playwright, as
the tests do; nothing downloads a browser.

Each run opens a fresh browser context (empty cache) on a node whose setup is
done, so `/` shows the login page. "Usable" is the moment the Username and
Password inputs and an enabled "Sign in" button are in the page, recorded in
the page itself (a MutationObserver installed before any script runs, read
against performance.timeOrigin), so the figure carries no Playwright round
trip. Bytes are the response bodies and headers the browser received, as
Playwright's request.sizes() reports them. A reload in the same context shows
what revalidation costs (ETag, 304).

The same run also loads a baseline: a static page holding the same three
controls and nothing else, served on loopback by the standard library's
http.server, so the figure can be read as a ratio to what this browser on this
machine needs for any page with a form (its floor: a new context, navigation,
parse, first layout).

    python bench/bench_panel.py [--runs 15]
"""

import argparse
import http.server
import os
import threading
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Daemon, install_cleanup, loadavg, temp_dir  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]
TARGET_BYTES, TARGET_MS = 200 * 1024, 300.0

# Runs before the page's own scripts: notes when the login form becomes usable.
WATCH_FOR_FORM = """
(() => {
  const usable = () => {
    const button = [...document.querySelectorAll('button')].find(b => b.textContent.trim() === 'Sign in');
    return button && !button.disabled && document.querySelector('input[name=username]')
      && document.querySelector('input[type=password]');
  };
  new MutationObserver((_, observer) => {
    if (window.__usableAt === undefined && usable()) {
      window.__usableAt = performance.now();
      observer.disconnect();
    }
  }).observe(document, {childList: true, subtree: true, attributes: true});
})();
"""


BASELINE_PAGE = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>baseline</title></head>
<body><form><label>Username <input name="username"></label><label>Password <input type="password"></label>
<button>Sign in</button></form></body></html>"""


class _BaselineHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(BASELINE_PAGE)))
        self.end_headers()
        self.wfile.write(BASELINE_PAGE)

    def log_message(self, *args):
        pass


def usable_after(browser, origin: str) -> float:
    """ms from navigation start to a usable form, in a fresh context (empty cache)."""
    context = browser.new_context(base_url=origin)
    context.add_init_script(WATCH_FOR_FORM)
    page = context.new_page()
    page.goto("/")
    page.wait_for_function("() => window.__usableAt !== undefined", timeout=15000)
    usable = page.evaluate("() => window.__usableAt")
    context.close()
    return usable


def one_load(browser, origin: str) -> dict:
    context = browser.new_context(base_url=origin)
    context.add_init_script(WATCH_FOR_FORM)
    page = context.new_page()
    requests = []
    page.on("requestfinished", lambda request: requests.append(request))
    page.goto("/")
    page.wait_for_function("() => window.__usableAt !== undefined", timeout=15000)
    page.wait_for_load_state("networkidle")
    usable_ms = page.evaluate("() => window.__usableAt")
    files = {}
    for request in requests:
        sizes = request.sizes()
        files[request.url.removeprefix(origin)] = (sizes["responseBodySize"], sizes["responseHeadersSize"])
    reloaded = []
    page.on("requestfinished", lambda request: reloaded.append(request))
    page.reload()
    page.wait_for_load_state("networkidle")
    revalidation = sum(r.sizes()["responseBodySize"] + r.sizes()["responseHeadersSize"] for r in reloaded)
    statuses = sorted({r.response().status for r in reloaded if r.response()})
    context.close()
    return {"usable_ms": usable_ms, "files": files, "revalidation": revalidation, "reload_statuses": statuses}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    install_cleanup()
    daemon = Daemon(temp_dir()).start()
    try:
        daemon.setup_admin()
        origin = f"http://127.0.0.1:{daemon.admin_port}"
        print(f"load average before: {loadavg():.2f}")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
            one_load(browser, origin)  # warm the browser process and the daemon once, not counted
            baseline_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BaselineHandler)
            threading.Thread(target=baseline_server.serve_forever, daemon=True).start()
            baseline_origin = f"http://127.0.0.1:{baseline_server.server_address[1]}"
            usable_after(browser, baseline_origin)  # warm, not counted
            runs, baseline = [], []
            for _ in range(args.runs):  # interleaved, so both see the same machine
                runs.append(one_load(browser, origin))
                baseline.append(usable_after(browser, baseline_origin))
            baseline_server.shutdown()
            browser.close()
    finally:
        daemon.stop()
    print(f"load average after: {loadavg():.2f}")

    files = runs[-1]["files"]
    body = sum(b for b, _ in files.values())
    headers = sum(h for _, h in files.values())
    print(f"\nfirst load of / ({len(files)} requests):")
    for path, (size, head) in sorted(files.items(), key=lambda item: -item[1][0]):
        print(f"  {size:8,d} B body  {head:5,d} B headers  {path}")
    verdict = "meets" if body <= TARGET_BYTES else "MISSES"
    print(f"  total {body:,d} B of bodies ({body / 1024:.1f} KB), {body + headers:,d} B with headers: "
          f"{verdict} the target of {TARGET_BYTES // 1024} KB")
    times = sorted(run["usable_ms"] for run in runs)
    median = statistics.median(times)
    verdict = "meets" if median <= TARGET_MS else "MISSES"
    print(f"\nlogin form usable after navigation start, {len(times)} cold loads: median {median:.0f} ms, "
          f"min {times[0]:.0f} ms, max {times[-1]:.0f} ms: {verdict} the target of {TARGET_MS:.0f} ms")
    floor = statistics.median(baseline)
    print(f"baseline (the same form as one static page from http.server), same run: median {floor:.0f} ms, "
          f"min {min(baseline):.0f} ms; the panel's median is {median / floor:.2f} x the baseline")
    last = runs[-1]
    print(f"reload in the same context: {last['revalidation']:,d} B transferred, statuses {last['reload_statuses']}")


if __name__ == "__main__":
    main()
