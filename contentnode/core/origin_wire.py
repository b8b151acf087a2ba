"""An origin's answer read off a kept-alive connection: its head, then its body by its framing.

The origin client (core/http_origin.py) reads every miss's answer here rather
than through http.client, whose head parser (the email package) cost most of
a miss's CPU. The head is read strictly within MAX_HEAD and MAX_FIELDS:
interim answers (1xx but 101, RFC 9110 §15.2: `100 Continue`, `103 Early
Hints`) are read and handed to the caller as they come (to pass on), never
taken for the answer, and their fields never join the final one's. The body's framing follows RFC 9112 §6.3: none
for HEAD, 1xx, 204 and 304; chunked when Transfer-Encoding ends with it
(trailers read and dropped); Content-Length when it is one valid length;
else until the origin closes the connection (then never reused).

A head the connection's buffer already holds whole (the usual case: one recv
brings it) is decoded once, split at its line breaks and checked with a few
whole-list operations (the names' bytes through one translate), never a
readline per line; any head those checks do not accept (a refusal, or a head
not yet wholly received) is read again line by line, which makes every
refusal with its own message. They accept only heads the line reader
accepts, and split them into the same fields. (An earlier version matched
the whole head with one regular expression: fewer Python calls, but the
expression ran ~75,000 instructions per 8-field head, more than the lines.)
"""

import re
from collections.abc import Callable
from operator import itemgetter

from contentnode.core import http_cache as hc
from contentnode.core.origin import OriginError

MAX_HEAD = 65536       # status line and field lines together, per answer (interim ones count apart)
MAX_FIELDS = 100
MAX_INTERIM = 16       # interim answers before the final one
EARLY_BYTES = 16 * 1024   # the interim answers' fields handed on, at most (the rest read and dropped)
_CHUNK_LINE = 4096     # a chunk-size line with its extensions
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")   # a field name (RFC 9110 5.1)
_TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"   # as _TOKEN


class ClosedBeforeAnswer(ConnectionError):
    """The origin closed the connection before a status line: on a reused connection, the sign
    that the origin dropped it while idle (the request may be sent again)."""


def _protocol(message: str) -> OriginError:
    return OriginError("protocol", f"the origin's answer is not valid HTTP/1.1 ({message})")


class Head:
    """The final answer's status line and fields (pairs as sent, and `fields`: by lower-case name,
    repeats joined, as http_cache.fields makes them), its framing, and the interim answers'
    statuses read before it."""

    __slots__ = ("status", "reason", "headers", "fields", "length", "chunked", "close", "interim", "held")

    def __init__(self, status: int, reason: str, headers: list, fields: dict, length: int | None, chunked: bool,
                 close: bool, interim: list, held: int = 0):
        self.status, self.reason, self.headers, self.fields = status, reason, headers, fields
        self.length, self.chunked, self.close, self.interim = length, chunked, close, interim
        self.held = held   # bytes after the head that came in the same read, in the reader's buffer (-1: not known)


def _status_line(line: bytes) -> tuple[bytes, int, str]:
    version, _, rest = line.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version[:7] != b"HTTP/1." or len(code) != 3 or not code.isdigit():
        raise _protocol("status line")
    return version, int(code), reason.rstrip(b"\r\n").decode("latin-1")


def _fields(reader, budget: int) -> list[tuple[str, str]]:
    fields: list[tuple[str, str]] = []
    for _ in range(MAX_FIELDS + 1):
        line = reader.readline(budget + 1)
        budget -= len(line)
        if budget < 0:
            raise _protocol(f"head larger than {MAX_HEAD} bytes")
        if line == b"\r\n" or line == b"\n":
            return fields
        if not line.endswith(b"\n"):
            raise _protocol("closed within the head")
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):   # obs-fold, space before ':', a name that is no token
            raise _protocol("field line")
        value = value.strip(b" \t\r\n")
        if b"\r" in value or b"\0" in value or b"\n" in value:
            raise _protocol("field value")
        fields.append((name.decode("latin-1"), value.decode("latin-1")))
    raise _protocol(f"more than {MAX_FIELDS} fields")


def _whole(data: bytes) -> tuple[str, int, str, list, int] | None:
    """(version, status, reason, fields, the head's length) of the head at the start of `data` when
    it is there whole within MAX_HEAD and MAX_FIELDS and the line reader would accept it; None for
    any other (which the line reader then reads, refusing it when it must)."""
    crlf = data.find(b"\n\r\n", 0, MAX_HEAD)   # a bare LF's empty line looked for only before it: the
    bare = data.find(b"\n\n", 0, crlf + 1 if crlf >= 0 else MAX_HEAD)   # body after the head is not scanned
    end = bare if bare >= 0 else crlf
    if end < 0:
        return None
    length = end + (3 if data[end + 1] == 13 else 2)   # the empty line ends with CRLF or a bare LF
    if length > MAX_HEAD:
        return None
    lines = data[:end].decode("latin-1").split("\n")
    version, _, rest = (lines[0] + "\n").partition(" ")   # with its line break, as the line reader sees it
    code, _, reason = rest.partition(" ")
    if version[:7] != "HTTP/1." or len(code) != 3 or not code.isascii() or not code.isdigit():
        return None
    rows = [line.partition(":") for line in lines[1:]]
    if len(rows) > MAX_FIELDS or not all(map(itemgetter(1), rows)):
        return None
    names = [name for name, _, _ in rows]
    values = [value.strip(" \t\r") for _, _, value in rows]
    inside = "".join(values)
    if "" in names or "".join(names).encode("latin-1").translate(None, _TOKEN_CHARS) or "\r" in inside or "\0" in inside:
        return None
    return version, int(code), reason.rstrip("\r\n"), list(zip(names, values)), length


def _buffered_head(reader) -> tuple[str, int, str, list, int] | None:
    """(version, status, reason, fields, bytes left in the buffer after it) of a head the reader's
    buffer holds whole (see _whole), taken from the buffer; None (nothing taken) for any other."""
    data = reader.peek()
    found = _whole(data)
    if found is None:
        return None
    reader.read(found[4])
    return found[0], found[1], found[2], found[3], len(data) - found[4]


def _read_lines(reader) -> tuple[str, int, str, list, int] | None:
    """(version, status, reason, fields, -1) read line by line; None when nothing came at all. What
    the last line's read left in the buffer is not known (-1): the connection is looked at again
    before it goes back to the pool (core/http_origin.py)."""
    line = reader.readline(MAX_HEAD + 1)
    if not line:
        return None
    if len(line) > MAX_HEAD or not line.endswith(b"\n"):
        raise _protocol("status line")
    version, status, reason = _status_line(line)
    return version.decode("latin-1"), status, reason, _fields(reader, MAX_HEAD - len(line)), -1


def read_head(reader, method: str, on_interim: Callable[[int, list], None] | None = None) -> Head:
    """The final answer's head from `reader` (a buffered binary file of the socket); interim
    answers before it are read, counted, and each handed to `on_interim(status, fields)` as it
    comes (within EARLY_BYTES of fields in all). ClosedBeforeAnswer when nothing came at all."""
    interim: list[int] = []
    kept = 0
    while True:
        head = _buffered_head(reader) or _read_lines(reader)
        if head is None:
            if interim:
                raise _protocol("closed after an interim answer")
            raise ClosedBeforeAnswer("the origin closed the connection before answering")
        version, status, reason, pairs, held = head
        if 100 <= status < 200 and status != 101:
            interim.append(status)
            if len(interim) > MAX_INTERIM:
                raise _protocol(f"more than {MAX_INTERIM} interim answers")
            kept += sum(len(name) + len(value) + 4 for name, value in pairs)
            if kept <= EARLY_BYTES and on_interim is not None:
                on_interim(status, pairs)
            continue
        return _final_head(version, status, reason, pairs, held, interim, method)


def _final_head(version: str, status: int, reason: str, pairs: list, held: int, interim: list, method: str) -> Head:
    """The final answer's Head: its framing by its fields and the request's method."""
    fields = hc.fields(pairs)
    connection = fields.get("connection", "").lower()
    close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if method == "HEAD" or status < 200 or status in (204, 304):
        return Head(status, reason, pairs, fields, 0, False, close, interim, held)
    coding = fields.get("transfer-encoding")
    if coding is not None:
        chunked = coding.replace(" ", "").lower().rsplit(",", 1)[-1] == "chunked"
        # with Transfer-Encoding, Content-Length means nothing; not chunked: read until the close
        return Head(status, reason, pairs, fields, None, chunked, close or not chunked, interim, held)
    length = fields.get("content-length")
    if length is None:
        return Head(status, reason, pairs, fields, None, False, True, interim, held)
    values = {v.strip() for v in length.split(",")}
    value = values.pop() if len(values) == 1 else ""
    if not (value.isascii() and value.isdigit()):
        raise _protocol("Content-Length")
    return Head(status, reason, pairs, fields, int(value), False, close, interim, held)


class Body:
    """The body of one answer, read in pieces of at most `size` bytes (read1: one socket read at
    most); `ended` once it was read whole, `reusable` when the connection may then carry another."""

    __slots__ = ("_reader", "_left", "_chunked", "_chunk_left", "ended", "reusable")

    def __init__(self, reader, head: Head):
        self._reader = reader
        self._left = head.length            # None: chunked or until the close
        self._chunked = head.chunked
        self._chunk_left = 0
        self.ended = head.length == 0
        # bytes past the announced length (none for a bodiless answer) that came with the head stay in
        # the reader's buffer, where the pool's idle check cannot see them: they would start the next
        # answer on the connection
        self.reusable = not head.close and (head.chunked or head.length is not None and head.held <= head.length)

    def read1(self, size: int) -> bytes:
        if self.ended or size <= 0:
            return b""
        if self._chunked:
            return self._chunk(size)
        if self._left is None:
            data = self._reader.read1(size)
            self.ended = not data
            return data
        data = self._reader.read1(min(size, self._left))
        if not data:
            raise _protocol(f"closed {self._left} bytes before the announced end")
        self._left -= len(data)
        self.ended = self._left == 0
        return data

    def _chunk(self, size: int) -> bytes:
        if self._chunk_left == 0:
            line = self._reader.readline(_CHUNK_LINE)
            if not line.endswith(b"\n"):
                raise _protocol("chunk size line")
            digits = line.split(b";", 1)[0].strip(b" \t\r\n")
            if not digits or len(digits) > 15 or digits.strip(b"0123456789abcdefABCDEF"):
                raise _protocol("chunk size")
            self._chunk_left = int(digits, 16)
            if self._chunk_left == 0:
                self._trailers()
                return b""
        data = self._reader.read1(min(size, self._chunk_left))
        if not data:
            raise _protocol("closed within a chunk")
        self._chunk_left -= len(data)
        if self._chunk_left == 0 and self._reader.readline(3) not in (b"\r\n", b"\n"):
            raise _protocol("chunk end")
        return data

    def _trailers(self) -> None:
        _fields(self._reader, MAX_HEAD)   # read and dropped: a trailer never changes the answer
        self.ended = True
