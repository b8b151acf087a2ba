"""Answers an origin sends without Content-Length (chunked or ended by closing the connection),
through a rule in cache_mode "origin" against the node (built in the test process) and the scripted
origin: stored when otherwise storable, and over the cache's cap passed through whole and not kept;
and an origin that sends more than its Content-Length, whose extra bytes never reach another answer."""

import contextlib
import os
import socket
import time

import pytest

from tests.origin_server import OriginServer
from tests.test_origin_cache import HOST, fetch, fetch_at_once, shared_site

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


def asked_raw(port: int, path: str, version: str = "HTTP/1.1", method: str = "GET") -> list:
    """Every answer to one request (no body) sent on its own connection (Connection: close),
    interim ones included, in order: [(status, headers by lower-case name, body)]."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"{method} {path} {version}\r\nHost: {HOST}\r\nConnection: close\r\n"
                     "Content-Length: 0\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    answers = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        if status < 200:
            answers.append((status, headers, b""))
            continue
        if "content-length" in headers:
            body, data = data[:int(headers["content-length"])], data[int(headers["content-length"]):]
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size, _, data = data.partition(b"\r\n")
                body, data = body + data[:int(size, 16)], data[int(size, 16) + 2:]
                if not int(size, 16):
                    break
        else:
            body, data = data, b""
        answers.append((status, headers, body))
    return answers


def test_interim_answers_are_passed_on_and_never_the_answer_nor_stored(node, admin, origin):
    """1xx answers before the final one (RFC 9110 §15.2: a proxy passes them on) reach an HTTP/1.1
    client first, with the node's own reason phrase and without hop-by-hop fields, and never an
    HTTP/1.0 one; the final answer is served and stored with its own fields only, and a hit sends no
    interim answer (the suite's interim-not-cached)."""
    shared_site(admin, origin)
    hints = [(100, {}), (103, {"Link": "</s.css>; rel=preload; as=style", "X-Hint": "early",
                               "Connection": "x-gone", "X-Gone": "1"})]
    origin.script("/i", b"final body", headers={"Cache-Control": "max-age=300", "Content-Type": "text/plain"},
                  interim=hints)
    origin.script("/ichunked", b"c" * 70_000, headers={"Cache-Control": "max-age=300"}, interim=hints, chunked=True)
    first = asked_raw(node.public_port, "/i")
    assert [status for status, _, _ in first] == [100, 103, 200]
    early = first[1][1]
    assert early["link"] == "</s.css>; rel=preload; as=style" and early["x-hint"] == "early"
    assert "x-gone" not in early and "connection" not in early
    status, headers, got = first[2]
    assert got == b"final body" and "x-hint" not in headers and "link" not in headers
    [(status, headers, got)] = asked_raw(node.public_port, "/i")   # a hit: no interim answer
    assert (status, got) == (200, b"final body") and "hit" in headers["cache-status"]
    [(status, headers, got)] = asked_raw(node.public_port, "/ichunked", "HTTP/1.0")   # never to HTTP/1.0
    assert (status, got) == (200, b"c" * 70_000) and "x-hint" not in headers
    for path, body in (("/i", b"final body"), ("/ichunked", b"c" * 70_000)):
        status, headers, got = fetch(node.public_port, path)
        assert status == 200 and got == body and "hit" in headers["cache-status"]
        assert len(origin.requests_for(path)) == 1
    origin.script("/form", b"made", status=201, interim=[(103, {"Link": "</f.js>; rel=preload"})])
    answers = asked_raw(node.public_port, "/form", method="POST")   # a method passed on: its 1xx too
    assert [(status, got) for status, _, got in answers] == [(103, b""), (201, b"made")]
    assert answers[0][1]["link"] == "</f.js>; rel=preload"
    # an interim answer and then nothing: passed on as it came, then a failure, never a stored 1xx
    origin.script("/cut", b"", status=103, headers={"Link": "</x>", "Connection": "close"})
    for _ in range(2):
        assert [status for status, _, _ in asked_raw(node.public_port, "/cut")] == [103, 502]
    assert len(origin.requests_for("/cut")) == 2


PAST_THE_END = {   # how an origin sends more than it frames: the /lie script's options
    "past the length, stored": {"length": 10, "headers": {"Cache-Control": "max-age=300"}},
    "past the length": {"length": 10, "headers": {"Cache-Control": "no-store"}},
    "past the length, head in pieces": {"length": 10, "split_head": True, "headers": {"Cache-Control": "no-store"}},
    "past the last chunk": {"chunked": True, "after": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforgd",
                            "headers": {"Cache-Control": "no-store"}},
}


@pytest.mark.parametrize("answer", PAST_THE_END)
def test_bytes_past_the_end_never_reach_the_next_answer(node, admin, origin, answer):
    """An origin that sends more than its Content-Length (the cache suite's headers-store-Content-Length
    does), also when the node read the head line by line (its status line came alone, so the head's
    read cannot tell what else came), or bytes past a chunked body's last chunk: the connection is not
    reused (it is looked at before it goes back to the pool), so the next request on it is answered by
    the origin, not by the extra bytes (a 502 "status line" before, or the forged answer)."""
    shared_site(admin, origin)
    script = PAST_THE_END[answer]
    body = b"0123456789" if script.get("chunked") else b"0123456789" + b"x" * 26
    origin.script("/lie", body, **script)
    origin.script("/next", b"n" * 50, headers={"Cache-Control": "no-store"})
    status, _, got = fetch(node.public_port, "/lie")
    assert (status, got) == (200, b"0123456789")
    status, _, got = fetch(node.public_port, "/next")
    assert (status, got) == (200, b"n" * 50)
    assert [len(origin.requests_for(p)) for p in ("/lie", "/next")] == [1, 1]


def test_an_interim_answer_reaches_the_client_as_it_comes(node, admin, origin):
    """A 103 Early Hints is worth something only before the final answer is ready: the origin sends
    it, then takes a second and a half for its answer; the client has the 103 long before the 200."""
    shared_site(admin, origin)
    origin.script("/slow", b"final", headers={"Cache-Control": "max-age=300"},
                  interim=[(103, {"Link": "</s.css>; rel=preload; as=style"})], interim_delay=1.5)
    with socket.create_connection(("127.0.0.1", node.public_port), timeout=30) as sock:
        sent = time.monotonic()
        sock.sendall(f"GET /slow HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        arrivals, data = [], b""
        while chunk := sock.recv(65536):
            data += chunk
            arrivals.append((time.monotonic() - sent, data.count(b"HTTP/1.1 ")))
    assert data.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload; as=style\r\n")
    assert b"HTTP/1.1 200 OK\r\n" in data and data.endswith(b"final")
    first_103 = min(at for at, heads in arrivals if heads >= 1)
    first_200 = min(at for at, heads in arrivals if heads >= 2)
    assert first_103 < 1.0 and first_200 >= 1.4, arrivals


@contextlib.contextmanager
def descriptors_past_1024():
    """The node runs in this process: descriptors held here until the next ones opened (a client's
    socket the node accepts, an origin connection) are past 1,024, where select.select refuses
    them; a public listener holds up to max_connections (16,384) sockets, so they often are."""
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_an_interim_answer_reaches_a_client_whose_descriptor_is_past_1024(node, admin, origin):
    """The 103 reaches such a client, then the 200 (a 502 before: select refused the descriptor)."""
    shared_site(admin, origin)
    origin.script("/hinted", b"final", headers={"Cache-Control": "max-age=300"},
                  interim=[(103, {"Link": "</s.css>; rel=preload"})])
    with descriptors_past_1024(), socket.create_connection(("127.0.0.1", node.public_port), timeout=30) as sock:
        sock.sendall(f"GET /hinted HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n")
    assert b"\r\n\r\nHTTP/1.1 200 OK\r\n" in data and data.endswith(b"final")


def test_an_origin_connection_past_1024_is_reused(node, admin, origin):
    """An origin connection whose descriptor is past 1,024 goes back to the pool and carries the
    next request (each request opened a new one before: the idle check's select refused it)."""
    shared_site(admin, origin)
    origin.script("/again", b"a" * 10, headers={"Cache-Control": "no-store"})
    with descriptors_past_1024():
        for _ in range(3):
            assert fetch(node.public_port, "/again")[2] == b"a" * 10
    assert len({seen.connection for seen in origin.requests_for("/again")}) == 1


def test_a_background_revalidation_passes_no_interim_answer_on(node, admin, origin):
    """Under stale-while-revalidate the stale answer goes at once and the origin is asked in the
    background: an interim answer it sends then belongs to no request of this connection, and
    nothing more reaches the client after its answer."""
    shared_site(admin, origin)
    origin.script("/swr", b"one", headers={"Cache-Control": "max-age=1, stale-while-revalidate=60"})
    assert fetch(node.public_port, "/swr")[2] == b"one"
    time.sleep(1.2)
    origin.script("/swr", b"two", headers={"Cache-Control": "max-age=1, stale-while-revalidate=60"},
                  interim=[(103, {"Link": "</late.css>; rel=preload"})], interim_delay=0.5)
    with socket.create_connection(("127.0.0.1", node.public_port), timeout=30) as sock:
        sock.sendall(f"GET /swr HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        data = b""
        while not data.endswith(b"one"):
            data += sock.recv(65536)
        assert data.startswith(b"HTTP/1.1 200 ") and b"stale-while-revalidate" in data
        sock.settimeout(1.5)   # the revalidation's 103, then its final answer, come and go meanwhile
        with pytest.raises(TimeoutError):
            extra = sock.recv(65536)
            raise AssertionError(f"bytes after the answer: {extra!r}")
    deadline = time.monotonic() + 10
    while len(origin.requests_for("/swr")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(origin.requests_for("/swr")) == 2
