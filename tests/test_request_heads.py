"""A request head whole in the buffer is parsed at once (http/request_head.py), else line by line.

The whole-head parse must accept only the heads the strict line reader accepts and give
the same request: a seeded set of generated heads (good and bad request lines, field
lines with every line ending, obs-fold, NUL, bare CR, repeated Host and Content-Length,
Content-Length with Transfer-Encoding, HTTP/1.0, absolute-form, too many fields, too
long, cut short) is sent over a real socket pair and read by a real listener's
RequestHandler, then read again through a reader that never shows its buffer (so every
head goes line by line), and both outcomes must be equal: the same method, target,
version, fields and keep-alive decision handed to the dispatcher, or the same refusal
sent byte for byte (but its Date), and the same bytes left for a body or the next request.
"""

import random
import socket
import threading

import pytest

from contentnode.http.connection import RequestHandler
from contentnode.http.request_head import MAX_HEAD, whole_head
from contentnode.http.server import Server
from contentnode.http.sockio import SocketReader, SocketWriter
from tests.seeded_heads import field_lines

pytestmark = pytest.mark.in_process  # no daemon: a listener's request handler over a socket pair

SEED = 3030
HEADS = 800
MEMO: dict = {}   # remembered parses, as a listener keeps them (Server.head_parses)

GOOD_LINES = [b"GET / HTTP/1.1", b"GET /a/b.txt?x=1&y=%20z HTTP/1.1", b"HEAD /x HTTP/1.1", b"GET /x HTTP/1.0",
              b"POST /up HTTP/1.1", b"PURGE /x HTTP/1.1", b"GET /caf\xc3\xa9 HTTP/1.1", b"GET /a\tb HTTP/1.1",
              b"GET /a\x00b HTTP/1.1", b"GET /a\rb HTTP/1.1", b"GET /%2e%2e/x HTTP/1.1", b"GET /a\x7f HTTP/1.1"]
BAD_LINES = [b"GET http://example.com/ HTTP/1.1", b"GET / HTTP/2.0", b"GET / FOO", b"GET  / HTTP/1.1", b"GET /",
             b"", b"G(T / HTTP/1.1", b"GET / HTTP/1.1 x", b"get / http/1.1", b"GET * HTTP/1.1",
             b"GET /" + b"a" * MAX_HEAD + b" HTTP/1.1"]
GOOD_FIELDS = [b"Host: example.com", b"host: Example.COM:8080", b"User-Agent: curl/8.5.0", b"Accept: */*",
               b"Accept-Encoding: gzip, deflate, br", b"Connection: keep-alive", b"Connection: close",
               b"Connection: Keep-Alive", b"Cookie: a=1", b"cookie: b=2", b"X-A: 1", b"x-a: 2", b"Content-Length: 0",
               b"Content-Length: 4", b"Content-Length:4", b"Transfer-Encoding: chunked", b"Empty:", b"Ws: \t v \t",
               b"Vt: \x0bv\x0c", b"Latin: \xe9t\xe9", b"Nbsp: \xa0v\xa0", b"Fs: \x1cv\x1f", b"Colons: a:b:c",
               b"Range: bytes=0-9", b"If-None-Match: \"e1\"", b"X-Forwarded-For: 192.0.2.1",
               b"X-Big: " + b"b" * 70000]
DISTINCT = [b"Host: example.com", b"User-Agent: curl/8.5.0", b"Accept: */*", b"Accept-Encoding: gzip, deflate, br",
            b"Connection: Keep-Alive", b"Ws: \t v \t", b"Vt: \x0bv\x0c", b"Latin: \xe9t\xe9", b"Nbsp: \xa0v\xa0",
            b"Fs: \x1cv\x1f", b"Colons: a:b:c", b"Range: bytes=0-9", b"X-Forwarded-For: 192.0.2.1", b"Empty:"]
BAD_FIELDS = [b" folded", b"\tfolded", b"Bad Name: x", b"Spaced : x", b"NoColon", b":nameless", b"Inner: a\rb",
              b"Nul: a\x00b", b"Transfer-Encoding: gzip", b"Content-Length: 5", b"Content-Length: abc",
              b"Content-Length: -1", b"Host: other.example", b"N\xe9: x"]
ENDINGS = [b"\r\n"] * 12 + [b"\n"] * 3 + [b"\r\r\n"]


def _line(rng, text: bytes) -> bytes:
    return text + rng.choice(ENDINGS)


def _head(rng) -> bytes:
    clean = rng.random() < 0.5
    out = _line(rng, rng.choice(GOOD_LINES if clean or rng.random() < 0.7 else BAD_LINES))
    count = rng.choice((0, 1, 3, 5, 8, 8, 8, 100, 101))
    if clean and count < 100 and rng.random() < 0.5:   # distinct fields, as most clients send
        return out + b"".join(_line(rng, field) for field in rng.sample(DISTINCT, min(count, len(DISTINCT)))) + b"\r\n"
    out += field_lines(rng, count, clean, GOOD_FIELDS, BAD_FIELDS, 0.15, _line)   # X-Big: a head over MAX_HEAD
    if rng.random() < 0.05:
        return out   # cut short: the client closes within the head
    return out + rng.choice((b"\r\n", b"\r\n", b"\n")) + rng.choice((b"body", b"GET /next HTTP/1.1\r\n\r\n", b""))


class _LinesOnly(SocketReader):
    """The reader with nothing to show of its buffer: every head is then read line by line."""

    def held(self) -> bytes:
        return b""


@pytest.fixture(scope="module")
def listener():
    seen = []

    def dispatch(handler):
        seen.append((handler.command, handler.path, handler.request_version, list(dict.items(handler.headers))))
        return None   # nothing to answer: only the parse is compared

    server = Server(("127.0.0.1", 0), dispatch, "heads")
    yield server, seen
    server.server_close()


def _outcome(listener, data: bytes, lines_only: bool):
    server, seen = listener
    seen.clear()
    left, right = socket.socketpair()
    sender = threading.Thread(target=lambda: (left.sendall(data), left.shutdown(socket.SHUT_WR)))
    try:
        sender.start()
        reader = (_LinesOnly if lines_only else SocketReader)(right)
        while reader._fill():   # all of it buffered, as a listener's loop thread holds a whole head
            pass
        sender.join()
        handler = RequestHandler.for_turn(server, right, ("127.0.0.1", 1), reader, SocketWriter(right))
        handler.handle_one_request()
        right.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := left.recv(65536):
            answer += chunk
        answer = b"".join(line for line in answer.splitlines(keepends=True) if not line.startswith(b"Date: "))
        return list(seen), handler.close_connection, answer, SocketReader.held(reader)
    finally:
        left.close()
        right.close()


def test_a_whole_head_parses_as_the_line_reader_reads_it(listener):
    rng = random.Random(SEED)
    kinds = {"served": 0, "refused": 0, "whole": 0, "whole_refused": 0}
    for _ in range(HEADS):
        data = _head(rng)
        fast = _outcome(listener, data, lines_only=False)
        assert fast == _outcome(listener, data, lines_only=True), data[:300]
        kinds["served" if fast[0] else "refused"] += 1
        whole = whole_head(data, MEMO) is not None
        kinds["whole"] += whole
        kinds["whole_refused"] += whole and not fast[0]   # taken at once, then refused for its framing
    # both outcomes well exercised, and the whole-head parse took many heads, some then refused (CL with TE)
    assert kinds["served"] > 250 and kinds["refused"] > 250 and kinds["whole"] > 150, kinds
    assert kinds["whole_refused"] >= 3, kinds


@pytest.mark.parametrize("data", [
    b"GET /hit/obj.bin HTTP/1.1\r\nHost: localhost:8080\r\n\r\n",   # wrk
    b"GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",   # curl
    b"GET /x HTTP/1.0\r\nHost: example.com\r\nConnection: Keep-Alive\r\n\r\n",   # ab
    b"GET / HTTP/1.1\nHost: example.com\n\n",
    b"HEAD /caf\xc3\xa9 HTTP/1.1\r\nHost: example.com\r\nAccept-Encoding: gzip, br\r\nConnection: close\r\n\r\nGET",
])
def test_common_heads_are_parsed_at_once(listener, data):
    found = whole_head(data, MEMO)
    assert found is not None
    method, target, version, headers, size, closes, framed = found
    assert data[size:] in (b"", b"GET") and data[:size].endswith(b"\n\n") or data[:size].endswith(b"\r\n\r\n")
    (seen, close, answer, left) = _outcome(listener, data, lines_only=False)
    assert seen == [(method, target, version, list(headers.items()))] and answer == b"" and left == data[size:]
    assert close == closes == (b"close" in data or version == "HTTP/1.0" and b"Keep-Alive" not in data)
    assert not framed
    assert whole_head(data + b"more", MEMO) == found   # met again: the same parse (remembered)
    if b"caf" in data:
        assert target == "/caf%C3%A9"


def test_repeated_fields_and_refusals_go_line_by_line(listener):
    """A repeated field (joined by the line reader) and every refusal are left to the line reader."""
    joined = b"GET / HTTP/1.1\r\nHost: a\r\nCookie: a=1\r\nCookie: b=2\r\nX-A: 1\r\nx-a: 2\r\n\r\n"
    assert whole_head(joined, MEMO) is None
    seen, close, answer, _ = _outcome(listener, joined, lines_only=False)
    assert seen[0][3] == [("host", "a"), ("cookie", "a=1; b=2"), ("x-a", "1, 2")] and not close
    for data, status in ((b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", b"400"),
                         (b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n", b"400"),
                         (b"GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", b"400"),
                         (b"GET / HTTP/1.1\r\nHost: a\x00\r\n\r\n", b"400"),
                         (b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", b"400"),
                         (b"GET / HTTP/1.2\r\nHost: a\r\n\r\n", b"505"),
                         (b"GET / HTTP/1.1\r\n" + b"X-A: 1\r\n" * 101 + b"\r\n", b"431")):
        assert whole_head(data, MEMO) is None
        seen, close, answer, _ = _outcome(listener, data, lines_only=False)
        assert not seen and close and answer.startswith(b"HTTP/1.1 " + status), (data, answer[:60])
    both = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\nbody"
    assert whole_head(both, MEMO) is not None   # well-formed lines: the framing check refuses it after either parse
    seen, close, answer, _ = _outcome(listener, both, lines_only=False)
    assert not seen and close and answer.startswith(b"HTTP/1.1 400 ")
