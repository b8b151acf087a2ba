"""Compression and images on rules in cache_mode "origin" against the node (built in the test
process) and the scripted origin: stored answers go compressed to clients that accept it, by the
rules of bucket content (services/origin_encoding.py); what the origin encoded itself, or marked
no-transform, passes through untouched; image variants are made from a source fetched through the
shared cache and kept only while that source is fresh."""

import gzip
import io

import pytest

from tests.origin_server import OriginServer
from tests.test_origin_cache import HOST, fetch, shared_site

pytestmark = pytest.mark.in_process   # HTTP to the App


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


def test_stored_answers_go_compressed(node, admin, origin):
    shared_site(admin, origin)
    css = b"body { color: black; }\n" * 400
    origin.script("/s.css", css, headers={"Cache-Control": "max-age=300", "Content-Type": "text/css",
                                          "Vary": "Accept-Language"}, etag='"c1"')
    gz = {"Accept-Encoding": "gzip"}
    status, headers, body = fetch(node.public_port, "/s.css", gz)     # the fill streams as sent
    assert status == 200 and body == css and "content-encoding" not in headers
    assert headers["vary"] == "Accept-Language, Accept-Encoding"
    status, headers, body = fetch(node.public_port, "/s.css", gz)
    assert status == 200 and headers["content-encoding"] == "gzip" and gzip.decompress(body) == css
    assert len(body) < len(css) // 10 and headers["etag"] == '"c1-gzip"' and "hit" in headers["cache-status"]
    assert headers["vary"] == "Accept-Language, Accept-Encoding"
    assert fetch(node.public_port, "/s.css", {**gz, "If-None-Match": '"c1-gzip"'})[0] == 304
    status, headers, body = fetch(node.public_port, "/s.css")
    assert body == css and "content-encoding" not in headers and headers["etag"] == '"c1"'
    assert len(origin.requests_for("/s.css")) == 1
    purged = admin.post("/api/purge", {"urls": [f"http://{HOST}/s.css"]})
    assert purged.json == {"purged": 2}                       # the stored answer and its gzip variant


def test_what_may_not_be_compressed_passes_through(node, admin, origin):
    shared_site(admin, origin)
    text = b"already compressed by the origin\n" * 100
    packed = gzip.compress(text)
    origin.script("/pre.txt", packed, headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain",
                                               "Content-Encoding": "gzip"})
    origin.script("/nt.txt", text, headers={"Cache-Control": "max-age=300, no-transform",
                                            "Content-Type": "text/plain"})
    origin.script("/img.png", b"\x89PNG" + bytes(5000), headers={"Cache-Control": "max-age=300",
                                                                 "Content-Type": "image/png"})
    origin.script("/tiny.txt", b"small", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"})
    for path, body in (("/pre.txt", packed), ("/nt.txt", text), ("/img.png", b"\x89PNG" + bytes(5000)),
                       ("/tiny.txt", b"small")):
        for _ in range(2):
            status, headers, got = fetch(node.public_port, path, {"Accept-Encoding": "gzip, br, zstd"})
            assert status == 200 and got == body, path
        assert "hit" in headers["cache-status"] and "vary" not in headers, path
        assert headers.get("content-encoding") == ("gzip" if path == "/pre.txt" else None), path


def _png(width: int, height: int) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def _size(data: bytes) -> tuple:
    from PIL import Image
    return Image.open(io.BytesIO(data)).size


def test_image_variants_follow_the_sources_freshness(node, admin, origin):
    shared_site(admin, origin, images=True)
    origin.script("/p.png", _png(120, 80), headers={"Cache-Control": "max-age=6", "Content-Type": "image/png"},
                  etag='"i1"')
    origin.script("/nostore.png", _png(60, 40), headers={"Cache-Control": "no-store", "Content-Type": "image/png"})
    for _ in range(2):
        status, headers, body = fetch(node.public_port, "/p.png?w=30")
        assert status == 200 and _size(body) == (30, 20)
    assert headers["x-cache"] == "HIT" and len(origin.requests_for("/p.png")) == 1
    original = fetch(node.public_port, "/p.png")              # the source, as the shared cache stored it
    assert original[0] == 200 and "hit" in original[1]["cache-status"] and len(origin.requests_for("/p.png")) == 1
    node.set_clock_offset(6.5)                               # the source is stale: so is its variant
    status, headers, body = fetch(node.public_port, "/p.png?w=30")
    assert status == 200 and _size(body) == (30, 20) and headers["x-cache"] == "MISS"
    seen = origin.requests_for("/p.png")
    assert len(seen) == 2 and seen[1].headers.get("if-none-match") == '"i1"' and seen[1].target == "/p.png"
    for asked in (1, 2):                                     # a source never stored: nor is its variant
        status, _, body = fetch(node.public_port, "/nostore.png?w=20")
        assert status == 200 and _size(body)[0] == 20 and len(origin.requests_for("/nostore.png")) == asked
    assert fetch(node.public_port, "/missing.png?w=20")[0] == 404
