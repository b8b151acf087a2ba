"""core/origin_wire.py reads a head its buffer holds whole at once, else line by line.

The whole-head reading must accept only the heads the line reader accepts and split
them into the same fields: a seeded set of generated heads (good and bad
status lines and field lines, bare LF, interim answers, too many fields, too
long, cut short) is sent over a real socket pair and read by read_head, then
read again from a reader that never shows its buffer (so every head goes line
by line), and both outcomes must be equal: the same head, or the same refusal
with the same message, and the same bytes left for the body.
"""

import random
import socket
import threading

import pytest

from contentnode.core import origin_wire
from contentnode.core.origin import OriginError
from tests.seeded_heads import field_lines

pytestmark = pytest.mark.in_process  # no daemon: the origin client's reader over a socket pair

SEED = 3131
HEADS = 600
SENT_AT_ONCE = 100_000   # well within a socket pair's buffer

GOOD_STATUS = [b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK", b"HTTP/1.1 204 No Content", b"HTTP/1.1 304 Not Modified",
               b"HTTP/1.1 200 ", b"HTTP/1.1 200 O\rK\r", b"HTTP/1.1 200 \x00\xff", b"HTTP/1.1x 200 OK",
               b"HTTP/1.1 404 Not Found"]
BAD_STATUS = [b"HTTP/1.1 200", b"HTTP/1.1 2000 OK", b"HTTP/2 200 OK", b"HTTP/1.1 20x OK", b"http/1.1 200 OK", b"",
              b"HTTP/1.1  200 OK"]
INTERIM = [b"HTTP/1.1 100 Continue", b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>"]
GOOD_FIELDS = [b"Content-Length: 5", b"Content-Length: 5, 5", b"Content-Length:5", b"Transfer-Encoding: chunked",
               b"Connection: close", b"Connection: keep-alive", b"X-A: 1", b"x-a: 2", b"Cache-Control: max-age=60",
               b"ETag: \"e1\"", b"Empty:", b"Empty2: \t ", b"Cr:\r", b"Tail: a \t \r", b"Lead:\r\t b",
               b"Vt: \x0bv\x0c", b"Latin: \xe9t\xe9", b"Colons: a:b:c", b"Spaces: a   b \t c", b"Via: 1.1 a",
               b"Date: Sat, 28 Nov 2026 16:00:00 GMT", b"X-Big: " + b"b" * 70000]
BAD_FIELDS = [b"Content-Length: 5,6", b"Inner: a\rb", b"Nul: a\x00b", b"Nul2: \x00", b" Folded: x", b"\tfolded",
              b"Bad Name: x", b"Spaced : x", b"NoColon", b":nameless"]
ENDINGS = [b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r\r\n"]


def _line(rng, text: bytes) -> bytes:
    return text.replace(b"\r\n", rng.choice(ENDINGS)) + rng.choice(ENDINGS)


def _head(rng) -> bytes:
    if rng.random() < 0.03:
        return b""   # the origin closes without answering
    out = b""
    if rng.random() < 0.15:
        out += _line(rng, rng.choice(INTERIM)) + rng.choice((b"\r\n", b"\n"))
    clean = rng.random() < 0.5
    out += _line(rng, rng.choice(GOOD_STATUS if clean or rng.random() < 0.7 else BAD_STATUS))
    count = rng.choice((0, 1, 3, 8, 8, 8, 100, 101))
    out += field_lines(rng, count, clean, GOOD_FIELDS, BAD_FIELDS, 0.2, _line)   # X-Big: a head over MAX_HEAD
    if rng.random() < 0.05:
        return out   # cut short: the origin closes within the head
    return out + rng.choice((b"\r\n", b"\r\n", b"\n")) + b"body"


class _LinesOnly:
    """The reader with nothing to peek at: read_head then reads every head line by line."""

    def __init__(self, reader):
        self._reader = reader
        self.readline, self.read = reader.readline, reader.read

    def peek(self, size: int = 0) -> bytes:
        return b""


def _outcome(data: bytes, lines_only: bool):
    left, right = socket.socketpair()
    sender = threading.Thread(target=lambda: (left.sendall(data), left.shutdown(socket.SHUT_WR)))
    try:
        if len(data) <= SENT_AT_ONCE:   # all in the socket before the first read: the head is wholly buffered
            sender.run()
        else:
            sender.start()
        reader = right.makefile("rb", 64 * 1024)
        try:
            head = origin_wire.read_head(_LinesOnly(reader) if lines_only else reader, "GET")
            got = ("head", head.status, head.reason, head.headers, head.fields, head.length, head.chunked, head.close,
                   head.interim)
        except OriginError as exc:
            got = ("refused", exc.code, exc.message)
        except origin_wire.ClosedBeforeAnswer:
            got = ("closed",)
        return got, reader.read()
    finally:
        if sender.ident is not None:
            sender.join()
        left.close()
        right.close()


def test_a_buffered_head_reads_as_the_line_reader_reads_it():
    rng = random.Random(SEED)
    kinds = {"head": 0, "refused": 0, "closed": 0, "buffered": 0}
    for _ in range(HEADS):
        data = _head(rng)
        fast = _outcome(data, lines_only=False)
        assert fast == _outcome(data, lines_only=True), data[:300]
        kinds[fast[0][0]] += 1
        kinds["buffered"] += origin_wire._whole(data) is not None
    # both outcomes well exercised, and the whole-head reading took many heads (a final one, or an interim one)
    assert kinds["head"] > 150 and kinds["refused"] > 100 and kinds["closed"] > 5 and kinds["buffered"] > 150, kinds


def test_a_buffered_head_is_split_into_its_fields():
    data = (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A:  a  b \t\r\nx-a: 2\r\nEmpty:\r\n"
            b"Latin: \xe9\n\r\nbody")
    (kind, status, reason, headers, fields, length, chunked, close, interim), rest = _outcome(data, False)
    assert (kind, status, reason, length, chunked, close, interim, rest) == ("head", 200, "OK", 4, False, False, [],
                                                                            b"body")
    assert headers == [("Content-Length", "4"), ("X-A", "a  b"), ("x-a", "2"), ("Empty", ""), ("Latin", "\xe9")]
    assert fields == {"content-length": "4", "x-a": "a  b, 2", "empty": "", "latin": "\xe9"}


@pytest.mark.parametrize("answer, method, reusable", [
    (b"HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\n", "GET", True),
    (b"HTTP/1.1 304 Not Modified\r\nETag: \"a\"\r\n\r\nHTTP/1.1 200 OK\r\n", "GET", False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", "HEAD", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", "HEAD", False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", "GET", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbodyextra", "GET", False),
])
def test_bytes_after_a_framed_answer_that_came_with_its_head_keep_the_connection_from_reuse(answer, method, reusable):
    """What came in the head's read past the answer's framing (a 304's or a HEAD answer's: nothing)
    would be read as the next answer on the connection: such a connection is not reused."""
    left, right = socket.socketpair()
    try:
        left.sendall(answer)
        reader = right.makefile("rb", 64 * 1024)
        head = origin_wire.read_head(reader, method)
        assert origin_wire.Body(reader, head).reusable is reusable
    finally:
        left.close()
        right.close()
