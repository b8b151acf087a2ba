"""REDbot, the HTTP linter, on the real daemon: a compressed and an uncompressed cached object,
a range, a 304 and a 404 draw no note of REDbot's "bad" level, nor an unexpected warning.

REDbot checks each answer and makes follow-up requests of its own (a range,
If-None-Match and If-Modified-Since, a gzip negotiation). "bad" is what REDbot
reports as a violation of HTTP: none may appear. Its warnings are advice; only
those about choices the node makes on purpose (docs/API.md, "Compressed
delivery") are allowed, any other fails too.
"""

import json
import subprocess
import sys

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

HOST = "lint.example.test"   # resolved to 127.0.0.1 by tests/redbot_check.py
# the warnings that stay: `Cache-Control: public` is the node's documented header for rules
# without signed links; a 304 for the identity tag turns into a 200 when REDbot adds
# Accept-Encoding: gzip (one strong tag per representation)
ALLOWED_WARNINGS = {"STORE_PUBLIC_UNNECESSARY", "VARY_STATUS_MISMATCH"}
PAGE = b"<!doctype html><title>t</title>" + b"".join(b"<p>line %d of the page</p>\n" % i for i in range(80))


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("redbot")), seaweed, host=HOST)
    instance.add_rule("/", prefix="r/", cache_ttl=600)
    instance.put("r/page.html", PAGE, "text/html; charset=utf-8")
    instance.put("r/data.bin", bytes(range(256)) * 16, "application/octet-stream")
    yield instance
    instance.close()


def redbot(site, path, *headers):
    url = f"http://{HOST}:{site.node.public_port}{path}"
    done = subprocess.run([sys.executable, "-m", "tests.redbot_check", url, *headers],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    response = lines.pop()
    for note in lines:
        print(f"{path} {headers}: {note['level']}: {note.get('name')}: {note['summary']}")
    return response, [note for note in lines if note["level"] == "bad"
                      or note["level"] == "warning" and note["name"] not in ALLOWED_WARNINGS]


def header(response, name):
    return [value.strip() for key, value in response["headers"] if key.lower() == name.lower()]


@pytest.mark.parametrize("path, headers, status, coding", [
    ("/page.html", ("Accept-Encoding: gzip, br, zstd",), 200, "zstd"),
    ("/page.html", ("Accept-Encoding: gzip",), 200, "gzip"),
    ("/page.html", (), 200, None),
    ("/data.bin", ("Accept-Encoding: gzip",), 200, None),
    ("/page.html", ("Accept-Encoding: gzip", "Range: bytes=0-99"), 206, "gzip"),
    ("/data.bin", ("Range: bytes=100-199",), 206, None),
    ("/missing.html", ("Accept-Encoding: gzip",), 404, None),
])
def test_redbot_finds_no_problem(site, path, headers, status, coding):
    site.get(path, headers={"Accept-Encoding": "gzip, br, zstd"})   # cached (and compressed) first
    site.get(path, headers={"Accept-Encoding": "gzip"})
    response, problems = redbot(site, path, *headers)
    assert response["status"] == status
    assert header(response, "Content-Encoding") == ([coding] if coding else [])
    assert problems == []


@pytest.mark.parametrize("coding", ["gzip", None])
def test_redbot_finds_no_problem_with_a_304(site, coding):
    asked = {"Accept-Encoding": coding} if coding else {}
    etag = site.get("/page.html", headers=asked).headers["etag"]
    extra = (f"Accept-Encoding: {coding}",) if coding else ()
    response, problems = redbot(site, "/page.html", *extra, f"If-None-Match: {etag}")
    assert response["status"] == 304 and header(response, "ETag") == [etag]
    assert header(response, "Vary") == ["Accept-Encoding"] and header(response, "Content-Type") == []
    assert problems == []
