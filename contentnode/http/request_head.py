"""A request head already whole in the buffer, parsed with a few whole-string operations.

The strict line reader (http/connection.py) reads a head one line at a time:
a readline, a regular expression and a Headers.add per line, about 450
bytecodes for a browser's head, on every request of the public port. Most
heads arrive whole in one recv, so `whole_head` takes such a head at once:
decoded once, its CRLFs made LFs, split at its line breaks, its field lines
split at their first colon by one map, every name checked as a token by one
translate over all of them, every name lower-cased by one lower() over all
of them. It accepts only heads the line reader accepts and gives the same
request line, the same fields and the same bytes consumed; any head it does
not accept (a refusal to make, a repeated field, a line break it does not
expect, a head not yet whole) it leaves to the line reader, which reads it
and makes every refusal with its own status and message, as before
(tests/test_request_heads.py compares the two over seeded heads, good and
bad). core/origin_wire.py reads an origin's answers the same way.
"""

import re
from itertools import repeat

MAX_HEADERS = 100
MAX_HEAD = 65536  # request line and header lines together; worst case per connection
TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"   # as TOKEN
_NAMES_JOINED = _TOKEN_CHARS + b"\n"   # names joined by line breaks, checked in one translate
_RAW_TARGET_BYTE = re.compile(r"[^\x21-\x7e]")  # a byte RFC 9112 never lets a request target carry raw
_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"))   # tokens, known
_VERSIONS = ("HTTP/1.1", "HTTP/1.0")
_WHITESPACE = " \t\x0b\x0c"   # what bytes.strip() takes off a value, but the line breaks (none are left)
MEMO_HEADS = 512        # distinct heads whose parse is kept (past it, all are forgotten) ...
MEMO_HEAD_BYTES = 4096  # ... each at most this long: 2 MiB of heads at most, their parses about as much again


class Headers(dict):
    """Request headers by lower-case name; a repeated header is joined as RFC 9110 allows."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)

    def __getitem__(self, name):
        return dict.__getitem__(self, name.lower())

    def __contains__(self, name):
        return dict.__contains__(self, name.lower())

    def add(self, name: str, value: str) -> bool:
        """Add one header line; False when a repeat is not allowed (Host, differing Content-Length)."""
        if not dict.__contains__(self, name):
            dict.__setitem__(self, name, value)
            return True
        if name == "host" or name == "content-length":
            return name == "content-length" and dict.__getitem__(self, name) == value
        joiner = "; " if name == "cookie" else ", "
        dict.__setitem__(self, name, dict.__getitem__(self, name) + joiner + value)
        return True


def percent_encoded(target: str) -> str:
    """The target with every raw non-ASCII or control byte percent-encoded (the request line
    was read as Latin-1, one character per byte). Every later step then sees one spelling:
    raw UTF-8 works as its encoded form does, and invalid UTF-8 or a control byte is
    refused where its encoded form is, never passed on decoded as Latin-1."""
    if _RAW_TARGET_BYTE.search(target) is None:
        return target
    return _RAW_TARGET_BYTE.sub(lambda found: f"%{ord(found.group()):02X}", target)


def whole_head(buffer: bytes, memo: dict) -> tuple[str, str, str, Headers, int, bool, bool] | None:
    """(method, target, version, headers, the head's length, whether the connection closes after it,
    whether it names a framing (Content-Length, Transfer-Encoding: for the caller to check)) of the
    request head at the start of `buffer` when it is there whole and the line reader would accept
    it as it is; None for any other head (nothing is consumed: the line reader reads it). The
    parse of a head met again byte for byte (a client asking again, the case in which a prepared
    answer can be given) is remembered in `memo` (the listener's: http/server.py Server.head_parses);
    its Headers are the caller's to copy."""
    crlf = buffer.find(b"\n\r\n", 0, MAX_HEAD)   # an empty line ends the head: CRLF, or a bare LF before it
    bare = buffer.find(b"\n\n", 0, crlf + 1 if crlf >= 0 else MAX_HEAD)
    end = bare if bare >= 0 else crlf
    if end < 0:
        return None
    head = buffer[:end + (2 if bare >= 0 else 3)]
    found = memo.get(head)
    if found is None:
        found = _parsed(head, end)
        if found is not None and len(head) <= MEMO_HEAD_BYTES:
            if len(memo) >= MEMO_HEADS:
                memo.clear()
            memo[head] = found
    return found


def _parsed(head: bytes, end: int) -> tuple[str, str, str, Headers, int, bool, bool] | None:
    """whole_head's tuple for a head (`end`: where its empty line starts), or None."""
    text = head[:end].decode("latin-1")
    if "\r" in text:
        text = (text + "\n").replace("\r\n", "\n")[:-1]   # every line may end in CRLF; a CR elsewhere: refused
        if "\r" in text:
            return None
    if "\0" in text:
        return None
    lines = text.split("\n")
    words = lines[0].split(" ")
    if len(words) != 3:
        return None
    method, target, version = words
    if version not in _VERSIONS or target[:1] != "/" or method not in _METHODS and not TOKEN.fullmatch(method):
        return None
    fields = lines[1:]
    headers = Headers()
    if fields:
        if len(fields) > MAX_HEADERS:
            return None
        names, colons, values = zip(*map(str.partition, fields, repeat(":")))
        joined = "\n".join(names)
        if not all(colons) or "" in names or joined.encode("latin-1").translate(None, _NAMES_JOINED):
            return None
        headers.update(zip(joined.lower().split("\n"), map(str.strip, values, repeat(_WHITESPACE))))
        if len(headers) != len(fields):
            return None   # a repeated field: the line reader joins it, or refuses it
    framed = dict.__contains__(headers, "content-length") or dict.__contains__(headers, "transfer-encoding")
    return method, percent_encoded(target), version, headers, len(head), closes(version, headers), framed


def closes(version: str, headers: Headers) -> bool:
    """Whether the connection closes after a request, by its version and Connection field."""
    connection = dict.get(headers, "connection", "").lower()   # lower-case names: the dict's own lookup
    return "close" in connection if version == "HTTP/1.1" else "keep-alive" not in connection
