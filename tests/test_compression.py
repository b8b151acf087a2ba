"""Compressed delivery end to end: codings by client preference, one cached variant per coding,
validators and ranges on the representation sent, purges, the rule switch and the metrics."""

import gzip
import http.client
import io
import time
import zlib

import brotli
import pytest
from PIL import Image

try:
    from compression import zstd   # Python 3.14+
except ImportError:
    from backports import zstd   # the test extra on older interpreters

from contentnode.core import encodings, s3_sign
from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

PAGE = b"<!doctype html><title>t</title>" + b"".join(b"<p>line %d of the page</p>\n" % i for i in range(80))
DECODE = {"gzip": gzip.decompress, "zstd": zstd.decompress, "br": brotli.decompress}


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("compress")), seaweed)
    instance.add_rule("/s", prefix="z/", cache_ttl=600)
    instance.add_rule("/plain", prefix="z/", compress=False)
    instance.add_rule("/nocache", prefix="z/", cache_ttl=0)
    instance.add_rule("/signed", prefix="z/", signed=True)
    instance.add_rule("/img", prefix="z/", images=True)
    yield instance
    instance.close()


def ask(site, path, coding=None, **headers):
    if coding is not None:
        headers["Accept-Encoding"] = coding
    return site.get(path, headers={k.replace("_", "-"): v for k, v in headers.items()})


def test_every_offered_coding_decodes_to_the_origin_bytes_and_is_made_once(site):
    site.put("z/page.html", PAGE, "text/html; charset=utf-8")
    plain = ask(site, "/s/page.html")
    assert plain.body == PAGE and "content-encoding" not in plain.headers
    assert plain.headers["vary"] == "Accept-Encoding"
    tags = {plain.headers["etag"]}
    for coding in ("gzip", "zstd", "br"):
        first = ask(site, "/s/page.html", coding)
        again = ask(site, "/s/page.html", coding)
        assert first.headers["content-encoding"] == coding and first.headers["vary"] == "Accept-Encoding"
        assert DECODE[coding](first.body) == PAGE and len(first.body) * 3 < len(PAGE)
        assert again.headers["x-cache"] == "HIT" and again.body == first.body
        assert first.headers["etag"] == again.headers["etag"] == plain.headers["etag"][:-1] + f'-{coding}"'
        assert int(first.headers["content-length"]) == len(first.body)
        tags.add(first.headers["etag"])
    assert len(tags) == 4   # one entity tag per representation
    assert site.origin_gets("z/page.html") == 1   # every variant was made from the cached copy


@pytest.mark.parametrize("accept, sent", [
    ("gzip, deflate, br, zstd", "zstd"),   # equal weights: the node's order
    ("br;q=1, gzip;q=0.8", "br"),
    ("x-gzip", "gzip"),
    ("*", "zstd"),
    ("gzip;q=0", None),
    ("gzip;q=0.5, identity", None),        # identity weighs more
    ("compress, identity;q=0", None),      # nothing acceptable: identity anyway, never 406
    ("*;q=0", None),
    ("", None),
    ("gzip;q=2, br;q=abc", None),          # malformed weights count as not listed
    ("zstd;q=0, *;q=0.3, identity;q=0.1", "br"),
])
def test_negotiation_follows_rfc_9110(site, accept, sent):
    site.put("z/neg.json", b'{"k": "%s"}' % (b"v" * 2000), "application/json")
    answer = ask(site, "/s/neg.json", accept)
    assert answer.status == 200 and answer.headers["vary"] == "Accept-Encoding"
    assert answer.headers.get("content-encoding") == sent
    body = DECODE[sent](answer.body) if sent else answer.body
    assert body.startswith(b'{"k": "vvv')


def test_conditional_requests_and_ranges_use_the_representation_sent(site):
    site.put("z/cond.js", PAGE, "application/javascript")
    whole = ask(site, "/s/cond.js", "gzip")
    tag = whole.headers["etag"]
    identity_tag = ask(site, "/s/cond.js").headers["etag"]
    assert tag != identity_tag
    hit = ask(site, "/s/cond.js", "gzip", If_None_Match=tag)
    assert hit.status == 304 and hit.body == b"" and hit.headers["etag"] == tag
    assert hit.headers["vary"] == "Accept-Encoding" and "content-encoding" not in hit.headers
    assert ask(site, "/s/cond.js", If_None_Match=tag).status == 200        # identity is another tag
    assert ask(site, "/s/cond.js", "gzip", If_None_Match=identity_tag).status == 200
    assert ask(site, "/s/cond.js", If_None_Match=identity_tag).status == 304
    part = ask(site, "/s/cond.js", "gzip", Range="bytes=10-29")
    assert part.status == 206 and part.body == whole.body[10:30]
    assert part.headers["content-range"] == f"bytes 10-29/{len(whole.body)}"
    assert part.headers["content-encoding"] == "gzip" and part.headers["vary"] == "Accept-Encoding"
    same = ask(site, "/s/cond.js", "gzip", Range="bytes=10-29", If_Range=tag)
    assert same.status == 206
    stale = ask(site, "/s/cond.js", "gzip", Range="bytes=10-29", If_Range=identity_tag)
    assert stale.status == 200 and stale.body == whole.body
    unsatisfiable = ask(site, "/s/cond.js", "gzip", Range=f"bytes={len(whole.body)}-")
    assert unsatisfiable.status == 416


def test_head_equals_get_without_the_body(site):
    site.put("z/head.css", PAGE, "text/css")
    for coding in (None, "gzip"):
        get = ask(site, "/s/head.css", coding)
        head = site.get("/s/head.css", method="HEAD", headers={"Accept-Encoding": coding or "identity"})
        assert head.status == 200 and head.body == b""
        for name in ("content-length", "content-encoding", "etag", "vary", "content-type", "cache-control"):
            assert head.headers.get(name) == get.headers.get(name), name


def test_what_is_never_compressed(site):
    site.put("z/small.txt", b"x" * (encodings.MIN_BYTES - 1), "text/plain")
    site.put("z/photo.png", b"\x89PNG" + b"\0" * 4000, "image/png")
    site.put("z/pack.zip", b"PK" + b"\0" * 4000, "application/zip")
    for path in ("/s/small.txt", "/s/photo.png", "/s/pack.zip"):
        answer = ask(site, path, "gzip, br, zstd")
        assert answer.status == 200 and "content-encoding" not in answer.headers, path
        assert "vary" not in answer.headers, path
    site.put("z/off.svg", PAGE, "image/svg+xml")
    for path in ("/plain/off.svg", "/nocache/off.svg"):   # turned off by the rule; never cached
        answer = ask(site, path, "gzip")
        assert answer.body == PAGE and "content-encoding" not in answer.headers and "vary" not in answer.headers
    assert ask(site, "/s/off.svg", "gzip").headers["content-encoding"] == "gzip"


def test_rule_switch_is_a_revisioned_member(site):
    rule_id = site.add_rule("/switch", prefix="z/")
    rule = site.admin.get(f"/api/rules/{rule_id}")
    assert rule.json["compress"] is True
    site.put("z/switch.txt", PAGE, "text/plain")
    assert ask(site, "/switch/switch.txt", "gzip").headers["content-encoding"] == "gzip"
    changed = site.admin.put(f"/api/rules/{rule_id}", {"compress": False},
                             headers={"If-Match": rule.headers["etag"]})
    assert changed.status == 200 and changed.json["compress"] is False
    answer = ask(site, "/switch/switch.txt", "gzip")
    assert answer.body == PAGE and "content-encoding" not in answer.headers
    bad = site.admin.put(f"/api/rules/{rule_id}", {"compress": "yes"})
    assert bad.status == 400 and bad.json["error"]["field"] == "compress"


@pytest.mark.parametrize("purge", ["url", "prefix", "all"])
def test_purges_remove_the_variants(site, purge):
    key, path = f"z/purge/{purge}.txt", f"/s/purge/{purge}.txt"
    site.put(key, PAGE, "text/plain")
    for coding in ("gzip", "br"):
        assert DECODE[coding](ask(site, path, coding).body) == PAGE
    body = {"url": {"urls": [f"http://{site.host}{path}"]},
            "prefix": {"domain": site.host, "prefix": "/s/purge/"},
            "all": {"all": True}}[purge]
    response = site.admin.post("/api/purge", body)
    assert response.status == 200 and response.json["purged"] >= 3   # the object and its two codings
    site.put(key, PAGE.upper(), "text/plain")
    for coding in ("gzip", "br"):
        answer = ask(site, path, coding)
        assert answer.headers["x-cache"] == "MISS" and DECODE[coding](answer.body) == PAGE.upper()


def test_signed_links_compress_and_still_need_their_signature(site):
    site.put("z/secret.txt", PAGE, "text/plain")
    assert ask(site, "/signed/secret.txt", "gzip").status == 403
    link = site.admin.post("/api/links", {"url": f"http://{site.host}/signed/secret.txt", "expires_in": 600})
    assert link.status in (200, 201), link.body
    url = link.json["url"]
    answer = ask(site, url[url.index("/signed/"):], "gzip")
    assert answer.status == 200 and gzip.decompress(answer.body) == PAGE
    assert answer.headers["cache-control"].startswith("private")


def test_image_variants_are_unchanged(site):
    picture = io.BytesIO()
    Image.new("RGB", (64, 48), "navy").save(picture, "PNG")
    site.put("z/pic.png", picture.getvalue(), "image/png")
    plain = ask(site, "/img/pic.png?w=32&format=webp")
    coded = ask(site, "/img/pic.png?w=32&format=webp", "gzip, br, zstd")
    assert coded.status == 200 and coded.headers["content-type"] == "image/webp"
    assert coded.body == plain.body and coded.headers["etag"] == plain.headers["etag"]
    assert "content-encoding" not in coded.headers and "vary" not in coded.headers


def test_metrics_count_the_compressed_bytes(site):
    site.put("z/metered.txt", PAGE, "text/plain")
    ask(site, "/s/metered.txt", "gzip")   # made before the count starts

    def sent():
        return sum(point["bytes_out"] for point in site.admin.get("/api/metrics?range=1h").json["points"])

    before = sent()
    answers = [ask(site, "/s/metered.txt", "gzip") for _ in range(3)]
    assert all(len(a.body) < len(PAGE) // 3 for a in answers)
    assert sent() - before == sum(len(a.body) for a in answers)


def test_gzip_matches_zlib_at_the_documented_level():
    out = encodings.compress("gzip", PAGE)
    assert gzip.decompress(out) == PAGE
    packer = zlib.compressobj(encodings.GZIP_LEVEL, zlib.DEFLATED, 31)
    assert out == packer.compress(PAGE) + packer.flush()


def s3_put(weed, bucket, key, data, headers):
    """A signed S3 PUT straight to SeaweedFS's S3 port, keeping headers (Content-Encoding) that
    its filer API would not."""
    port = int(weed.direct_endpoint.rsplit(":", 1)[1])
    path = f"/{bucket}/{key}"
    headers = {"host": f"127.0.0.1:{port}", "x-amz-date": s3_sign.amz_date(time.time()),
               "x-amz-content-sha256": "UNSIGNED-PAYLOAD", **{k.lower(): v for k, v in headers.items()}}
    headers["Authorization"] = s3_sign.authorization("PUT", path, "", headers, "UNSIGNED-PAYLOAD", weed.access_key,
                                                     weed.secret_key, weed.region, "s3", headers["x-amz-date"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        conn.request("PUT", path, body=data, headers=headers)
        response = conn.getresponse()
        assert response.status == 200, response.read()
    finally:
        conn.close()


def test_an_object_stored_encoded_goes_out_as_it_is(site):
    s3_put(site.seaweed, site.bucket, "z/packed.txt", gzip.compress(PAGE),
           {"Content-Type": "text/plain", "Content-Encoding": "gzip"})
    for accept in ("gzip, br, zstd", "br"):
        answer = ask(site, "/s/packed.txt", accept)
        assert answer.headers.get("content-encoding") == "gzip" and "vary" not in answer.headers
        assert gzip.decompress(answer.body) == PAGE


def test_an_object_the_cache_cannot_keep_is_sent_as_it_is(site):
    """Too large for the cache's cap: streamed from the origin, never compressed per request."""
    text = b"".join(b"line %d of a large text\n" % i for i in range(90_000))   # about 2 MiB
    assert encodings.MIN_BYTES < len(text) < encodings.MAX_BYTES
    site.put("z/large.txt", text, "text/plain")
    assert site.admin.put("/api/settings", {"cache_max_bytes": 1 << 20}).status == 200
    site.node.restart()   # the cap applies at once
    try:
        gets = []
        for coding in (None, "gzip"):   # gzip asked for costs the origin what identity does
            before = site.origin_gets("z/large.txt")
            answer = ask(site, "/s/large.txt", coding)
            assert answer.body == text and "content-encoding" not in answer.headers
            gets.append(site.origin_gets("z/large.txt") - before)
        assert gets[0] == gets[1] > 0, gets
    finally:
        assert site.admin.put("/api/settings", {"cache_max_bytes": 1 << 30}).status == 200
        site.node.restart()


def test_without_the_extras_only_gzip_is_offered(monkeypatch):
    assert list(encodings.CODERS) == ["zstd", "br", "gzip"]   # the test extra installs both
    monkeypatch.setattr(encodings, "_module", lambda *names: None)
    assert list(encodings._available()) == ["gzip"]
