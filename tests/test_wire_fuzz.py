"""A seeded wire fuzzer over request lines, headers and bodies on both ports (issue 12).

Each connection carries exactly one generated request whose body, when it has
one, is itself a complete request (`GET /healthz`). The client then half-closes,
so a request that promises more body than it sends ends at once instead of at
the 10 s read deadline. Asserted for every connection: an answer or a clean
close (never a hang, never bytes that are not HTTP), at most one response (a
second one would be a request parsed out of the body), and every 500 matched by
a log line. Bounded: a few hundred requests per port, well under a minute.
"""

import random
import re
import socket
import time

import pytest

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed

SEED = 1212
REQUESTS_PER_PORT = 400
SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"

METHODS = [b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS", b"PATCH", b"get", b"G\x00T", b"", b"GET GET",
           b"\xff\xfe", b"CONNECT"]
PATHS = [b"/healthz", b"/api/login", b"/api/session", b"/", b"/.well-known/service/check?nonce=abcdefghijklmnop",
         b"/%00", b"/%zz", b"/a/../../etc/passwd", b"*", b"http://localhost/healthz", b"/api/audit?limit=" + b"9" * 5000,
         b"/api/users/%ff%fe", b"/static/x?w=" + b"1" * 30, b"/" + b"a" * 9000, "/€".encode(), b"/x y"]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b"", b"HTTP/0.9", b"http/1.1"]
HOSTS = [b"localhost", b"127.0.0.1:1", b"[::1]", b"[::1]evil", b"localhost:abc", b"", b"cdn.example.test",
         b"a" * 300, "例え.jp".encode(), b"localhost\x00"]
LENGTHS = [None, b"0", b"5", b"-1", b"+5", b"5, 5", b"5,6", b"9" * 4301, b"\xc2\xb2", b" 7 ", b"65537", b"0x10",
           b"18446744073709551616"]
CODINGS = [None, b"chunked", b"gzip", b"identity", b"gzip, chunked", b"chunked, chunked", b"Chunked", b"chunked;x=1",
           b"\x00"]
EXTRA = [b"Expect: 100-continue", b"Connection: close", b"Connection: keep-alive", b"Content-Type: application/json",
         b"Content-Type: text/plain", b"X-Forwarded-For: 203.0.113.9", b"Origin: http://evil.example",
         b"Cookie: session=" + b"z" * 100, b"NoColonHere", b" Folded: value", b"Bad Name: x", b"X: \x01\x7f",
         b"Range: bytes=0-" + b"9" * 40, b"If-None-Match: *", b"Host: second.example", b"X-Big: " + b"b" * 70000,
         b"Content-Length: 3"]


def _pick(rng: random.Random, options: list, usual: int):
    """Mostly one of the first `usual` (well-formed) options, so requests get past the parser too."""
    return rng.choice(options[:usual] if rng.random() < 0.7 else options)


def _generate(rng: random.Random) -> bytes:
    eol = b"\r\n" if rng.random() < 0.85 else rng.choice([b"\n", b"\r", b"\r\r\n"])
    parts = (_pick(rng, METHODS, 4), _pick(rng, PATHS, 5), _pick(rng, VERSIONS, 2))
    line = b" ".join(x for x in parts if x or rng.random() < 0.5)
    headers = []
    if rng.random() < 0.9:
        headers.append(b"Host: " + _pick(rng, HOSTS, 3))
    length = rng.choice(LENGTHS)
    coding = rng.choice(CODINGS) if rng.random() < 0.5 else None
    if length is not None:
        headers.append(b"Content-Length: " + length)
    if coding is not None:
        headers.append(b"Transfer-Encoding: " + coding)
    headers += rng.sample(EXTRA, rng.randint(0, 3))
    rng.shuffle(headers)
    body = b""
    if length is not None or coding is not None:  # without either, more bytes would be a pipelined request
        body = rng.choice([SMUGGLED, b'{"a":1}' + SMUGGLED, b"0\r\n\r\n" + SMUGGLED, b"5\r\nhello\r\n0\r\n\r\n" + SMUGGLED,
                           bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))) + SMUGGLED])
    return line + eol + b"".join(h + eol for h in headers) + eol + body


_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) [^\r\n]*\r\n")


def _responses(data: bytes, head_request: bool) -> list:
    """Statuses of the complete responses in `data`; AssertionError on anything that is not HTTP."""
    statuses, pos = [], 0
    while pos < len(data):
        found = _STATUS.match(data, pos)
        assert found, f"not an HTTP response at byte {pos}: {data[pos:pos + 80]!r}"
        end = data.index(b"\r\n\r\n", pos) + 4
        head = data[pos:end].decode("latin-1").lower()
        status = int(found.group(1))
        length = re.search(r"\r\ncontent-length: (\d+)\r\n", head)
        # a HEAD answer has no body, unless the request line was refused before it was read as HEAD
        bodyless = head_request and data[end:end + 9] in (b"", b"HTTP/1.1 ")
        body = 0 if bodyless or status in (204, 304) or not length else int(length.group(1))
        assert end + body <= len(data), f"a truncated response: {data[pos:pos + 200]!r}"
        statuses.append(status)
        pos = end + body
    return statuses


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused early (431, 414) and closed while we were still sending: a clean close
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break  # the server closed with our unread bytes in its buffer: a clean close
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("port_name", ["admin", "public"])
def test_seeded_wire_fuzz(node, admin, port_name):
    port = node.admin_port if port_name == "admin" else node.public_port
    rng = random.Random(f"{SEED}-{port_name}")
    started = time.monotonic()
    seen, errors = {}, 0
    for n in range(REQUESTS_PER_PORT):
        request = _generate(rng)
        reply = _exchange(port, request)
        statuses = _responses(reply, request.startswith(b"HEAD "))
        if len(statuses) > 1:  # only bytes past an accepted request's declared body may be read as another
            head, _, body = request.partition(b"\r\n\r\n")
            declared = re.search(rb"\r\ncontent-length: *(\d+)\r\n", head.lower() + b"\r\n")
            length = int(declared.group(1)) if declared else 0
            framed = length > 0 or b"\r\ntransfer-encoding:" in head.lower()  # a body the server had to read
            assert not (statuses[0] >= 400 and framed) and length < len(body), \
                f"request {n} got {statuses}: a second request was parsed out of its body: {request[:300]!r}"
        for status in statuses:
            seen[status] = seen.get(status, 0) + 1
            errors += status == 500
    elapsed = time.monotonic() - started
    print(f"{port_name}: {REQUESTS_PER_PORT} requests in {elapsed:.1f} s, statuses {sorted(seen.items())}")
    assert elapsed < 60
    logged = len(re.findall(r" ERROR contentnode\.\S+: ", node.log()))
    assert errors <= logged, f"{errors} answers 500 but {logged} error lines logged"
    assert admin.get("/healthz").status == 200  # still serving
