"""The panel's Traffic page in a real browser: reached from the domain page, the top tables show
the counted paths, clients, referers, statuses and cache outcomes, the charts draw, the live tail
follows new requests and filters by status; screenshots light, dark and at 375 px."""

import os
import re

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.panel_browser import check_page, hash_path, open_signed_in

HOST = "traffic.example.test"


def test_the_traffic_page_shows_top_tables_charts_and_a_live_tail(browser, node, admin):
    api = admin
    folder = os.path.join(node.data_dir, "sites", "t")
    os.makedirs(folder)
    with open(os.path.join(folder, "a.txt"), "wb") as f:
        f.write(b"a" * 2048)
    bucket = api.post("/api/buckets", {"name": "t", "type": "folder", "path": folder}).json["id"]
    assert api.post("/api/domains", {"host": HOST}).status == 201
    assert api.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket, "cache_ttl": 60}).status == 201
    public = node.client("public", host=HOST)
    for _ in range(3):
        assert public.get("/a.txt?v=secret").status == 200
    assert public.get("/gone.txt", headers={"Referer": "https://blog.example/post"}).status == 404

    context, page = open_signed_in(browser, node, ADMIN_USER, ADMIN_PASSWORD, f"/#/domains/{HOST}")
    page.get_by_role("link", name="Traffic", exact=True).first.wait_for()
    page.locator(".page-actions").get_by_role("link", name="Traffic").click()
    page.get_by_role("heading", level=1, name="Traffic").wait_for()
    assert hash_path(page) == f"/domains/{HOST}/traffic"
    paths = page.locator("section", has=page.get_by_role("heading", name="Top paths"))
    paths.get_by_role("cell", name="/a.txt").wait_for()
    assert paths.get_by_role("row").filter(has_text="/a.txt").inner_text().split("\t")[1:] == ["3", "6.1 KB"]
    referers = page.locator("section", has=page.get_by_role("heading", name="Top referers"))
    referers.get_by_role("cell", name="blog.example").wait_for()
    clients = page.locator("section", has=page.get_by_role("heading", name="Top clients"))
    clients.get_by_role("cell", name="127.0.0.0/24").wait_for()      # truncated by default
    page.locator("section", has=page.get_by_role("heading", name="Status codes")).get_by_role(
        "cell", name="404").wait_for()
    page.locator("section", has=page.get_by_role("heading", name="Cache outcomes")).get_by_role(
        "cell", name="hit").wait_for()
    assert page.get_by_test_id("traffic-chart").count() == 2
    assert "secret" not in page.inner_text("main")

    tail = page.locator("section", has=page.get_by_role("heading", name="Live tail"))
    tail.get_by_role("cell", name="GET /gone.txt").wait_for()
    assert tail.locator("tbody tr").count() == 4
    assert public.get("/new.txt").status == 404                         # followed without a reload
    tail.get_by_role("cell", name="GET /new.txt").wait_for()
    page.get_by_label("Status filter").select_option("2xx")
    page.wait_for_function("() => [...document.querySelectorAll('tbody tr')].some(r => r.textContent.includes('GET /a.txt'))")
    rows = tail.locator("tbody tr")
    assert rows.count() == 3 and all("GET /a.txt" in text for text in rows.all_inner_texts())
    assert page.get_by_label("Follow").is_checked()
    page.get_by_role("group", name="Range").get_by_role("button", name="24h").click()
    paths.get_by_role("cell", name="/a.txt").wait_for()
    check_page(page, "traffic")

    page.goto("/#/traffic")                                              # from the nav: the first domain
    page.get_by_role("heading", level=1, name="Traffic").wait_for()
    assert re.search(HOST, page.inner_text(".page-head"))
    context.close()
