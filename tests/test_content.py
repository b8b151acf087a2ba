"""The public content path end to end: real daemon, real SeaweedFS on loopback."""

import io
import threading

import pytest
from PIL import Image

from contentnode.public.content import byte_range
from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("content")), seaweed)
    instance.add_rule("/static", prefix="site/", cache_ttl=600)
    instance.add_rule("/private", prefix="secret/", signed=True)
    instance.add_rule("/img", prefix="pics/", images=True)
    instance.add_rule("/off", prefix="site/", enabled=False)
    yield instance
    instance.close()


def test_serves_object_then_from_cache(site):
    site.put("site/hello.txt", b"hello, world\n", "text/plain")
    first = site.get("/static/hello.txt")
    assert first.status == 200 and first.body == b"hello, world\n"
    assert first.headers["content-type"] == "text/plain"
    assert first.headers["cache-control"] == "public, max-age=600"
    assert first.headers["x-cache"] == "MISS"
    assert first.headers["etag"] and first.headers["last-modified"]
    second = site.get("/static/hello.txt")
    assert second.status == 200 and second.body == b"hello, world\n"
    assert second.headers["x-cache"] == "HIT" and second.headers["etag"] == first.headers["etag"]
    assert site.origin_gets("site/hello.txt") == 1
    head = site.get("/static/hello.txt", method="HEAD")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == "13"


def test_cached_copy_until_purge(site):
    site.put("site/change.txt", b"version 1")
    assert site.get("/static/change.txt").body == b"version 1"
    site.put("site/change.txt", b"version 2, longer")
    assert site.get("/static/change.txt").body == b"version 1"
    purge = site.admin.post("/api/purge", {"urls": [f"http://{site.host}/static/change.txt"]})
    assert purge.status == 200 and purge.json == {"purged": 1}
    fresh = site.get("/static/change.txt")
    assert fresh.body == b"version 2, longer" and fresh.headers["x-cache"] == "MISS"
    assert site.origin_gets("site/change.txt") == 2


def test_purge_by_prefix_and_all(site):
    for name in ("p1", "p2", "q1"):
        site.put(f"site/purge/{name}", name.encode())
        assert site.get(f"/static/purge/{name}").status == 200
    response = site.admin.post("/api/purge", {"domain": site.host, "prefix": "/static/purge/p"})
    assert response.json == {"purged": 2}
    assert site.get("/static/purge/q1").headers["x-cache"] == "HIT"
    assert site.get("/static/purge/p1").headers["x-cache"] == "MISS"
    response = site.admin.post("/api/purge", {"all": True})
    assert response.status == 200 and response.json["purged"] >= 2
    assert site.get("/static/purge/q1").headers["x-cache"] == "MISS"


@pytest.mark.parametrize("body,field", [
    ({}, None), ({"all": False}, "all"), ({"urls": []}, "urls"), ({"urls": ["ftp://x/y"]}, "urls"),
    ({"urls": ["http://cdn.example.test/a/../b"]}, "urls"), ({"domain": "cdn.example.test"}, None),
    ({"domain": "cdn.example.test", "prefix": "nope"}, "prefix"), ({"all": True, "urls": []}, "urls"),
    ({"urls": "http://cdn.example.test/x"}, "urls"), ({"everything": True}, "everything"),
])
def test_bad_purge_is_refused_and_changes_nothing(site, body, field):
    site.put("site/keep.txt", b"keep")
    site.get("/static/keep.txt")
    response = site.admin.post("/api/purge", body)
    assert response.status == 400 and response.error_code == "invalid"
    assert response.json["error"].get("field") == field
    assert site.get("/static/keep.txt").headers["x-cache"] == "HIT"


def test_warm_fills_the_cache(site):
    site.put("site/warm/a.bin", b"a" * 5000)
    site.put("site/warm/b.bin", b"b" * 7000)
    urls = [f"http://{site.host}/static/warm/a.bin", f"https://{site.host}/static/warm/b.bin",
            f"http://{site.host}/static/warm/missing", f"http://{site.host}/elsewhere/x"]
    response = site.admin.post("/api/warm", {"urls": urls})
    assert response.status == 200
    results = response.json["results"]
    assert [r["url"] for r in results] == urls
    assert [(r["ok"], r["status"], r["bytes"]) for r in results] == [
        (True, 200, 5000), (True, 200, 7000), (False, 404, 0), (False, 404, 0)]
    assert all(isinstance(r["ms"], (int, float)) for r in results)
    hit = site.get("/static/warm/b.bin")
    assert hit.headers["x-cache"] == "HIT" and hit.body == b"b" * 7000
    assert site.origin_gets("site/warm/b.bin") == 1
    too_many = site.admin.post("/api/warm", {"urls": [urls[0]] * 101})
    assert too_many.status == 400 and too_many.json["error"]["field"] == "urls"


def test_conditional_requests_get_304(site):
    site.put("site/cond.txt", b"conditional")
    first = site.get("/static/cond.txt")
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    same = site.get("/static/cond.txt", headers={"If-None-Match": etag})
    assert same.status == 304 and same.body == b"" and same.headers["etag"] == etag
    assert site.get("/static/cond.txt", headers={"If-None-Match": '"other", ' + etag}).status == 304
    assert site.get("/static/cond.txt", headers={"If-Modified-Since": modified}).status == 304
    changed = site.get("/static/cond.txt", headers={"If-None-Match": '"different"'})
    assert changed.status == 200 and changed.body == b"conditional"
    old = site.get("/static/cond.txt", headers={"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})
    assert old.status == 200


def test_if_range_compares_strongly(site):
    data = bytes(range(256)) * 8
    site.put("site/if-range.bin", data)
    first = site.get("/static/if-range.bin")
    etag, modified = first.headers["etag"], first.headers["last-modified"]
    assert etag.startswith('"'), etag
    for validator in (etag, modified):
        part = site.get("/static/if-range.bin", headers={"Range": "bytes=10-19", "If-Range": validator})
        assert part.status == 206 and part.body == data[10:20], validator
    for validator in (f"W/{etag}", '"other"', "Mon, 01 Jan 2001 00:00:00 GMT"):
        whole = site.get("/static/if-range.bin", headers={"Range": "bytes=10-19", "If-Range": validator})
        assert whole.status == 200 and whole.body == data, validator


def test_a_weak_current_etag_never_satisfies_if_range():
    weak = {"etag": 'W/"abc"', "last_modified": "Mon, 01 Jan 2001 00:00:00 GMT"}
    assert byte_range({"Range": "bytes=0-1", "If-Range": 'W/"abc"'}, 10, weak) is None
    assert byte_range({"Range": "bytes=0-1", "If-Range": '"abc"'}, 10, weak) is None
    assert byte_range({"Range": "bytes=0-1", "If-Range": weak["last_modified"]}, 10, weak) == (0, 2)


@pytest.mark.parametrize("warm_first", [False, True])
def test_ranges_get_206_and_bad_ranges_416(site, warm_first):
    key = f"site/range-{warm_first}.bin"
    data = bytes(range(256)) * 40
    site.put(key, data)
    path = "/" + key.replace("site/", "static/")
    if warm_first:
        assert site.get(path).headers["x-cache"] == "MISS"
    part = site.get(path, headers={"Range": "bytes=10-19"})
    assert part.status == 206 and part.body == data[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(data)}"
    assert part.headers["x-cache"] == ("HIT" if warm_first else "MISS")
    tail = site.get(path, headers={"Range": "bytes=-100"})
    assert tail.status == 206 and tail.body == data[-100:]
    rest = site.get(path, headers={"Range": "bytes=10000-"})
    assert rest.status == 206 and rest.body == data[10000:]
    for bad in ("bytes=20000-", "bytes=abc", "bytes=5-2", "bytes=-0"):
        refused = site.get(path, headers={"Range": bad})
        assert refused.status == 416, bad
        assert refused.headers["content-range"] == f"bytes */{len(data)}"
        assert refused.error_code == "range_not_satisfiable"
    whole = site.get(path, headers={"Range": "bytes=0-1,5-6"})
    assert whole.status == 200 and whole.body == data


def test_unknown_host_missing_rule_disabled_rule_and_methods(site):
    site.put("site/x.txt", b"x")
    assert site.get("/static/x.txt", host="other.example.test").status == 404
    assert site.get("/nothing/here").status == 404
    assert site.get("/off/x.txt").status == 404
    assert site.get("/static/none-such").status == 404
    post = site.node.client("public", host=site.host).request("POST", "/static/x.txt")
    assert post.status == 405 and post.headers["allow"] == "GET, HEAD"
    assert post.error_code == "method_not_allowed"


@pytest.mark.parametrize("raw", ["/static/../private/a", "/static/%2e%2e/private/a",
                                 "/static/a%2fb", "/static/a%2Fb", "/static/a%00b", "/static/a%5cb",
                                 "/static/./x.txt", "/static/%ff"])
def test_traversal_encoded_slash_and_nul_refused(site, raw):
    status, body = site.raw_get(raw)
    assert status == 400 and b'"invalid"' in body


def test_origin_down_is_502_without_details(site):
    site.put("site/down.txt", b"down")
    with site.seaweed.stopped():
        response = site.get("/static/down.txt")
    assert response.status == 502 and response.error_code == "bad_gateway"
    for secret in (site.bucket, "127.0.0.1", "site/down.txt", site.seaweed.access_key, "Connection"):
        assert secret.encode() not in response.body
    assert site.get("/static/down.txt").status == 200


def test_fifty_concurrent_misses_make_one_origin_get(site):
    data = bytes(range(256)) * 8192                  # 2 MiB
    site.put("site/flight.bin", data)
    results, lock = [], threading.Lock()
    start = threading.Barrier(50)

    def visitor():
        start.wait(30)
        response = site.get("/static/flight.bin")
        with lock:
            results.append((response.status, response.body == data, response.headers.get("x-cache")))

    threads = [threading.Thread(target=visitor) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 50 and all(status == 200 and same for status, same, _ in results)
    assert site.origin_gets("site/flight.bin") == 1


def signed(site, path, expires_in=600):
    response = site.admin.post("/api/links", {"url": f"http://{site.host}{path}",
                                              "expires_in": expires_in})
    assert response.status in (200, 201), response.body
    url = response.json["url"]
    return url[url.index(path):]


def test_signed_rule(site):
    site.put("secret/doc.txt", b"for your eyes only")
    assert site.get("/private/doc.txt").error_code == "signature_required"
    link = signed(site, "/private/doc.txt")
    ok = site.get(link)
    assert ok.status == 200 and ok.body == b"for your eyes only"
    assert ok.headers["cache-control"].startswith("private")
    sig = link.split("sig=")[1].split("&")[0]
    tampered = link.replace(sig, ("A" if sig[0] != "A" else "B") + sig[1:])
    assert site.get(tampered).error_code == "signature_invalid"
    assert site.get(link.replace("/private/doc.txt", "/private/other.txt")).status == 403
    short = signed(site, "/private/doc.txt", expires_in=60)
    site.node.set_clock_offset(120)
    try:
        expired = site.get(short)
        assert expired.status == 403 and expired.error_code == "link_expired"
    finally:
        site.node.set_clock_offset(0)


def test_signed_link_survives_rotation_within_grace(site):
    site.put("secret/rot.txt", b"rotating")
    link = signed(site, "/private/rot.txt")
    rotate = site.admin.post("/api/links/rotate", {})
    assert rotate.status in (200, 201), rotate.body
    assert site.get(link).status == 200
    fresh = signed(site, "/private/rot.txt")
    assert site.get(fresh).status == 200


def _image(size=(800, 600)):
    img = Image.linear_gradient("L").resize(size).convert("RGB")
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def test_image_variants(site):
    site.put("pics/photo.jpg", _image(), "image/jpeg")
    original = site.get("/img/photo.jpg")
    assert original.status == 200 and Image.open(io.BytesIO(original.body)).size == (800, 600)
    small = site.get("/img/photo.jpg?w=200&format=webp")
    assert small.status == 200 and small.headers["content-type"] == "image/webp"
    img = Image.open(io.BytesIO(small.body))
    assert (img.format, img.size) == ("WEBP", (200, 150))
    square = site.get("/img/photo.jpg?w=64&h=64&fit=cover&format=png")
    assert Image.open(io.BytesIO(square.body)).size == (64, 64)
    assert square.headers["etag"] != small.headers["etag"]
    again = site.get("/img/photo.jpg?format=webp&w=200")
    assert again.headers["x-cache"] == "HIT" and again.body == small.body
    assert site.origin_gets("pics/photo.jpg") == 1
    for query, field in (("w=5000", "w"), ("blur=2", "blur"), ("format=gif", "format"),
                         ("fit=cover&w=10", "fit")):
        bad = site.get(f"/img/photo.jpg?{query}")
        assert bad.status == 400 and bad.json["error"]["field"] == field
    site.put("pics/not-an-image.jpg", b"<html>nope</html>", "image/jpeg")
    assert site.get("/img/not-an-image.jpg?w=10").status == 400
    purge = site.admin.post("/api/purge", {"urls": [f"http://{site.host}/img/photo.jpg"]})
    assert purge.json["purged"] == 3                 # the original and both variants


def test_diagnose_tells_what_a_visitor_gets(site):
    """Diagnose's steps are recorded by the resolve the public port runs: same refusals, same words."""
    cases = [("/img/photo.jpg?w=0", "image", 400), ("/private/doc.txt?exp=1&kid=x&sig=y", "signature", 403),
             ("/off/probe.txt", "rule", 404), ("/nowhere/x", "rule", 404)]
    for path, step_name, status in cases:
        visitor = site.get(path)
        assert visitor.status == status, path
        report = site.admin.post("/api/diagnose", {"url": f"http://{site.host}{path}"}).json
        last = report["steps"][-1]
        assert (last["name"], last["ok"], report["ok"]) == (step_name, False, False), report
        if status != 404:
            assert last["detail"] == visitor.json["error"]["message"], (last, visitor.json)
    ok = site.admin.post("/api/diagnose", {"url": f"http://{site.host}/img/photo.jpg?w=10"}).json
    assert {"name": "image", "ok": True} in [{"name": s["name"], "ok": s["ok"]} for s in ok["steps"]]
    probe = site.admin.post("/api/probe", {"url": f"http://{site.host}/off/probe.txt"}).json
    assert probe["rule"]["enabled"] is False and probe["key"] == "site/probe.txt"


def test_probe_and_diagnose(site):
    site.put("site/probe.txt", b"probe me", "text/plain")
    url = f"http://{site.host}/static/probe.txt"
    probe = site.admin.post("/api/probe", {"url": url})
    assert probe.status == 200
    answer = probe.json
    assert answer["domain"]["host"] == site.host and answer["redirect"] is None
    assert answer["rule"]["path"] == "/static" and answer["key"] == "site/probe.txt"
    assert answer["bucket"]["id"] == site.bucket_id and answer["signature_required"] is False
    assert answer["origin"]["ok"] and answer["origin"]["size"] == 8
    assert answer["origin"]["content_type"] == "text/plain"
    assert answer["cache"]["cached"] is False
    site.get("/static/probe.txt")
    assert site.admin.post("/api/probe", {"url": url}).json["cache"]["cached"] is True
    assert "secret_key" not in probe.body.decode() and site.seaweed.secret_key not in probe.body.decode()

    report = site.admin.post("/api/diagnose", {"url": url}).json
    names = [s["name"] for s in report["steps"]]
    assert names == ["parse", "dns", "redirect", "domain", "rule", "signature", "origin", "cache"]
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["rule"]["ok"] and steps["origin"]["ok"] and steps["cache"]["ok"]
    assert steps["domain"]["ok"] is False                # pending: never checked
    assert report["ok"] is False
    assert all(isinstance(s["ms"], (int, float)) and s["detail"] for s in report["steps"])
    unsigned = site.admin.post("/api/diagnose", {"url": f"https://{site.host}/private/doc.txt"}).json
    steps = {s["name"]: s for s in unsigned["steps"]}
    assert steps["tls"]["ok"] is False and steps["signature"]["ok"] is False
    for endpoint in ("/api/probe", "/api/diagnose"):
        assert site.admin.post(endpoint, {"url": 5}).status == 400
        assert site.admin.post(endpoint, {}).json["error"]["field"] == "url"
