"""Answers an origin sends without Content-Length (chunked or ended by closing the connection),
through a rule in cache_mode "origin" against the node (built in the test process) and the scripted
origin: stored when otherwise storable, and over the cache's cap passed through whole and not kept;
and an origin that sends more than its Content-Length, whose extra bytes never reach another answer."""

import pytest

from tests.origin_server import OriginServer
from tests.test_origin_cache import fetch, fetch_at_once, shared_site

pytestmark = pytest.mark.in_process   # HTTP to the App


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


@pytest.mark.parametrize("framing", ["chunked", "close_delimited"])
def test_an_answer_without_a_length_is_stored(node, admin, origin, framing):
    shared_site(admin, origin)
    body = bytes(range(256)) * 1200     # 300 KiB, more than one read
    origin.script("/u", body, headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"},
                  **{framing: True})
    status, headers, got = fetch(node.public_port, "/u")
    assert status == 200 and got == body and "content-length" not in headers
    assert headers["cache-status"].startswith("contentnode; fwd=uri-miss; fwd-status=200; stored")
    status, headers, got = fetch(node.public_port, "/u")
    assert status == 200 and got == body and headers["content-length"] == str(len(body))
    assert headers["cache-status"].startswith("contentnode; hit")
    assert len(origin.requests_for("/u")) == 1
    # concurrent first requests share the one origin request
    origin.script("/many", body, headers={"Cache-Control": "max-age=300"}, delay=0.5, **{framing: True})
    answers = fetch_at_once(node.public_port, "/many", 10)
    assert [(s, b) for s, _, b in answers] == [(200, body)] * 10
    assert len(origin.requests_for("/many")) == 1


@pytest.mark.parametrize("framing", ["chunked", "close_delimited"])
def test_an_answer_without_a_length_over_the_cap_passes_through(node, admin, origin, framing):
    shared_site(admin, origin)
    assert admin.put("/api/settings", {"cache_max_bytes": 200_000}).status == 200
    body = bytes(range(256)) * 2000     # 512,000 bytes: more than the whole cache
    origin.script("/big", body, headers={"Cache-Control": "max-age=300"}, **{framing: True})
    for asked in (1, 2):
        status, headers, got = fetch(node.public_port, "/big")
        assert status == 200 and got == body
        assert "hit" not in headers["cache-status"]
        assert len(origin.requests_for("/big")) == asked
    books = admin.get("/api/cache").json
    assert books["bytes"] == 0 and books["entries"] == 0 and books["filling"] == 0
    # a small one still fits beside it and is kept
    origin.script("/small", b"s" * 50_000, headers={"Cache-Control": "max-age=300"}, **{framing: True})
    assert fetch(node.public_port, "/small")[2] == b"s" * 50_000
    assert "hit" in fetch(node.public_port, "/small")[1]["cache-status"]
    assert admin.get("/api/cache").json["entries"] == 1


def test_interim_answers_are_never_the_answer_nor_stored(node, admin, origin):
    """1xx answers before the final one (RFC 9110 §15.2) are read and set aside: the final answer
    is served and stored with its own fields only (the suite's interim-not-cached)."""
    shared_site(admin, origin)
    hints = [(100, {}), (103, {"Link": "</s.css>; rel=preload; as=style", "X-Hint": "early"})]
    origin.script("/i", b"final body", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"},
                  interim=hints)
    origin.script("/ichunked", b"c" * 70_000, headers={"Cache-Control": "max-age=300"}, interim=hints, chunked=True)
    for path, body in (("/i", b"final body"), ("/ichunked", b"c" * 70_000)):
        for _ in range(2):
            status, headers, got = fetch(node.public_port, path)
            assert status == 200 and got == body
            assert "x-hint" not in headers and "link" not in headers
        assert "hit" in headers["cache-status"] and len(origin.requests_for(path)) == 1
    # an interim answer and then nothing: a failure, never a stored 1xx
    origin.script("/cut", b"", status=103, headers={"Link": "</x>", "Connection": "close"})
    assert fetch(node.public_port, "/cut")[0] == 502
    assert fetch(node.public_port, "/cut")[0] == 502 and len(origin.requests_for("/cut")) == 2


@pytest.mark.parametrize("cache_control", ["max-age=300", "no-store"])
def test_bytes_past_the_announced_length_never_reach_the_next_answer(node, admin, origin, cache_control):
    """An origin that sends more than its Content-Length (the cache suite's headers-store-Content-Length
    does): the connection is not reused, so the next request on it is answered by the origin, not by
    the extra bytes (a 502 "status line" before)."""
    shared_site(admin, origin)
    origin.script("/lie", b"0123456789" + b"x" * 26, headers={"Cache-Control": cache_control}, length=10)
    origin.script("/next", b"n" * 50, headers={"Cache-Control": "no-store"})
    status, _, got = fetch(node.public_port, "/lie")
    assert (status, got) == (200, b"0123456789")
    status, _, got = fetch(node.public_port, "/next")
    assert (status, got) == (200, b"n" * 50)
    assert [len(origin.requests_for(p)) for p in ("/lie", "/next")] == [1, 1]
