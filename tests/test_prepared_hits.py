"""Memory hits given again from a prepared answer (public/prepared.py) against the real daemon.

Each request kind is asked with a header no request ever sent before (`X-Probe: <unique>`: a key
never offered, so the pipeline answers it) and then the same way several times over one kept-alive
connection (the first offers it, the next ones are given again, as
contentnode_public_prepared_answers_total counts). Every answer must be the pipeline's: the same
status, the same header fields in the same order but Date and Age, the same body. After a purge,
a rule change or an object change the next answer is the pipeline's new one; Age grows; CORS
and refusals are never given again, while a rule's access lists and rate limit decide every answer
given again; and the traffic tail, the request metrics and the access log count every answer given
again.
"""

import gzip
import itertools
import os
import re
import socket
import time

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.test_metrics_endpoint import sample, scrape
from tests.two_workers import wait_until

pytestmark = pytest.mark.daemon_process

HOST = "prepared.example.test"
PAGE = b"<p>a page worth compressing, held in memory once hit</p>\n" * 180   # about 10 KB
BLOB = os.urandom(10 * 1024)
AGAIN = "contentnode_public_prepared_answers_total"
_probes = itertools.count()


class KeptAlive:
    """Raw requests for `host` over one kept-alive connection (`sock`) to `node`'s public port."""

    host = HOST
    node: Node
    sock: socket.socket

    def ask(self, path: str, fields=(), method: str = "GET", probe: bool = False, version: str = "HTTP/1.1"):
        """(status, [(name, value)] as sent, body); with `probe`, a header no request sent before is
        added, so the pipeline answers."""
        fields = [("Host", self.host), *fields] + ([("X-Probe", str(next(_probes)))] if probe else [])
        head = f"{method} {path} {version}\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields) + "\r\n"
        self.sock.sendall(head.encode("latin-1"))
        return read_answer(self.sock, method == "HEAD")

    def again(self) -> float:
        return sample(scrape(self.node), AGAIN)


class Site(KeptAlive):
    """A node with a folder bucket under HOST and rules with their own settings per path prefix."""

    def __init__(self, workdir: str, env=None):
        self.root = os.path.join(workdir, "root", "site")
        os.makedirs(self.root)
        for name, body in {"page.html": PAGE, "blob.bin": BLOB, "other.html": PAGE}.items():
            self.write(name, body)
        self.node = Node(workdir, env={"CONTENTNODE_FOLDER_ROOTS": os.path.dirname(self.root), **(env or {})}).start()
        self.admin = self.node.client()
        assert self.admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        assert self.admin.post("/api/domains", {"host": HOST}).status == 201
        bucket = self.admin.post("/api/buckets", {"name": "site", "type": "folder", "path": self.root})
        assert bucket.status == 201, bucket.body
        self.bucket = bucket.json["id"]
        self.rules = {path: self.rule(path, **fields) for path, fields in {
            "/": {}, "/inc/": {"query": "include"}, "/hdr/": {"headers": {"X-Version": "1"}},
            "/short/": {"cache_ttl": 2}, "/limited/": {"rate_limit": {"rate": 1000, "burst": 1000}},
            "/cors/": {"cors": {"origins": ["https://app.example.test"]}}}.items()}
        self.sock = self.connect()

    def close(self) -> None:
        self.sock.close()
        self.node.close()

    def write(self, name: str, body: bytes) -> None:
        with open(os.path.join(self.root, name), "wb") as f:
            f.write(body)

    def rule(self, path: str, **fields) -> str:
        answer = self.admin.post("/api/rules", {"domain": HOST, "path": path, "bucket": self.bucket, **fields})
        assert answer.status == 201, answer.body
        return answer.json["id"]

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.node.public_port), timeout=10)
        return sock

    def warm(self, path: str, fields=()) -> None:
        """Filled, hit from its file, then from memory (for each encoding asked)."""
        for _ in range(3):
            status, _, _ = self.ask(path, fields, probe=True)
        assert status in (200, 206, 304, 416)


def read_answer(sock, head_only: bool):
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += _more(sock)
    head, _, buffer = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = [(name, value.strip()) for name, _, value in (line.partition(":") for line in lines[1:])]
    length = 0 if head_only else int(dict((n.lower(), v) for n, v in fields).get("content-length", "0"))
    while len(buffer) < length:
        buffer += _more(sock)
    assert len(buffer) == length, "nothing follows the answer asked for"
    return int(lines[0].split()[1]), fields, buffer


def _more(sock) -> bytes:
    chunk = sock.recv(1 << 20)
    assert chunk, "the connection closed before the answer was whole"
    return chunk


def shape(answer):
    """An answer as two answers of one request must agree: all but the Date and Age values."""
    status, fields, body = answer
    return status, [(n, "-" if n.lower() in ("date", "age") else v) for n, v in fields], body


def field(answer, name: str):
    return next((value for got, value in answer[1] if got.lower() == name.lower()), None)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    instance = Site(str(tmp_path_factory.mktemp("prepared")))
    yield instance
    instance.close()


def etag(site) -> str:
    return field(site.ask("/page.html", probe=True), "ETag")


KINDS = [  # (path, request fields, method)
    ("/page.html", [], "GET"),
    ("/page.html", [("Accept-Encoding", "gzip")], "GET"),
    ("/page.html", [("Accept-Encoding", "br")], "GET"),
    ("/page.html", [("Accept-Encoding", "gzip, deflate, br"), ("User-Agent", "Mozilla/5.0 (test)"),
                    ("Accept", "text/html"), ("Accept-Language", "en"), ("Referer", "https://ref.example.test/")],
     "GET"),
    ("/page.html", [], "HEAD"),
    ("/page.html", [("Accept-Encoding", "gzip")], "HEAD"),
    ("/blob.bin", [("Accept-Encoding", "gzip")], "GET"),
    ("/page.html?v=1", [], "GET"),                    # the rule ignores the query
    ("/inc/page.html?v=1", [], "GET"),                # the rule keeps it: its own entry
    ("/inc/page.html?v=2", [("Accept-Encoding", "gzip")], "GET"),
    ("/hdr/page.html", [], "GET"),                    # the rule's own header
    ("/page.html", [("Range", "bytes=0-99")], "GET"),
    ("/page.html", [("Range", "bytes=0-9,20-29")], "GET"),   # several ranges: the whole object
    ("/page.html", [("If-None-Match", '"not-this-one"')], "GET"),
    ("/page.html", [("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")], "GET"),
    ("/page.html", [("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")], "GET"),   # 304
    ("/page.html", [("X-Forwarded-For", "203.0.113.7")], "GET"),   # no trusted proxy: the peer counts
    ("/page.html", [("Connection", "keep-alive")], "GET", "HTTP/1.0"),
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: f"{kind[2]} {kind[0]} {kind[1]}"[:80])
def test_an_answer_given_again_is_the_pipelines(site, kind):
    path, fields, method, *version = kind
    site.warm(path, fields)
    reference = site.ask(path, fields, method, probe=True, version=(version or ["HTTP/1.1"])[0])
    before = site.again()
    answers = [site.ask(path, fields, method, version=(version or ["HTTP/1.1"])[0]) for _ in range(6)]
    given = site.again() - before
    assert given >= 3, f"only {given} of 6 answers were given again"
    assert reference[0] in (200, 206, 304) and field(reference, "X-Cache") == "HIT"
    for answer in answers + [site.ask(path, fields, method, probe=True, version=(version or ["HTTP/1.1"])[0])]:
        assert shape(answer) == shape(reference)
        assert abs(int(field(answer, "Age")) - int(field(reference, "Age"))) <= 2


def test_an_etag_match_is_a_304_given_again(site):
    tag = etag(site)
    reference = site.ask("/page.html", [("If-None-Match", tag)], probe=True)
    assert reference[0] == 304
    before = site.again()
    answers = [site.ask("/page.html", [("If-None-Match", tag)]) for _ in range(6)]
    assert site.again() - before >= 3
    assert all(shape(answer) == shape(reference) for answer in answers)


@pytest.mark.parametrize("kind", [
    ("/cors/page.html", [("Origin", "https://app.example.test")]),   # CORS fields per request
    ("/page.html", [("Range", "bytes=999999-")]),        # a refusal (416)
    ("/page.html", [("X-Large", "x" * 9000)]),           # a key over MAX_KEY_BYTES is never kept
])
def test_never_given_again(site, kind):
    path, fields = kind
    site.warm(path, fields)
    reference = site.ask(path, fields, probe=True)
    before = site.again()
    answers = [site.ask(path, fields) for _ in range(5)]
    assert site.again() == before
    assert all(shape(answer) == shape(reference) for answer in answers)


class From(KeptAlive):
    """Raw requests over one kept-alive connection from another loopback address."""

    def __init__(self, site, address: str):
        self.node = site.node
        self.sock = socket.socket()
        self.sock.settimeout(10)
        self.sock.bind((address, 0))
        self.sock.connect(("127.0.0.1", site.node.public_port))


def test_a_rate_limit_decides_every_answer_given_again(site):
    """The burst holds over answers given again: each spends a token, and past the burst the
    pipeline answers 429 (a token is spent only for an answer given)."""
    site.rule("/tight/", rate_limit={"rate": 1, "burst": 20})
    client = From(site, "127.0.0.8")
    try:
        before, started = site.again(), time.monotonic()
        statuses = [client.ask("/tight/page.html")[0] for _ in range(40)]
        elapsed = time.monotonic() - started
    finally:
        client.sock.close()
    given = statuses.count(200)
    assert 20 <= given <= 20 + int(elapsed) + 1, statuses
    assert statuses.count(429) == 40 - given and statuses[:20] == [200] * 20
    assert site.again() - before >= 12   # the fill, the file hit and the first memory hit are the pipeline's


def test_access_decides_every_answer_given_again(site):
    """The same request bytes from an address the rule's (then the domain's) access list refuses
    get 403, though their key was given again to an allowed address just before."""
    site.rule("/only/", access={"allow": ["127.0.0.5/32", "127.0.0.7/32"]})
    allowed, other, denied = (From(site, address) for address in ("127.0.0.5", "127.0.0.6", "127.0.0.7"))
    domain = site.admin.get(f"/api/domains/{HOST}")
    try:
        for client in (allowed, denied):
            assert [client.ask("/only/page.html")[0] for _ in range(3)] == [200] * 3   # filled, in memory
        before = site.again()
        assert [allowed.ask("/only/page.html")[0] for _ in range(5)] == [200] * 5
        assert site.again() - before >= 4
        status, _, body = other.ask("/only/page.html")
        assert status == 403 and b"forbidden_address" in body
        assert denied.ask("/only/page.html")[0] == 200
        put = site.admin.put(f"/api/domains/{HOST}", {"access": {"deny": ["127.0.0.7/32"]}},
                             headers={"If-Match": domain.headers["etag"]})
        assert put.status == 200, put.body
        for _ in range(3):
            assert allowed.ask("/only/page.html")[0] == 200
        before = site.again()
        status, _, body = denied.ask("/only/page.html")
        assert status == 403 and b"forbidden_address" in body
        assert [allowed.ask("/only/page.html")[0] for _ in range(3)] == [200] * 3
        assert site.again() - before >= 2
    finally:
        for client in (allowed, other, denied):
            client.sock.close()
        cleared = site.admin.put(f"/api/domains/{HOST}", {"access": None})
        assert cleared.status == 200 and cleared.json["access"] is None


def test_connection_close_is_answered_with_its_own_head(site):
    """An HTTP/1.0 request without keep-alive has the fields of a key offered over HTTP/1.1: the
    answer given again gets a head of its own that says the connection closes."""
    site.warm("/other.html")
    for _ in range(3):
        site.ask("/other.html")
    sock = site.connect()
    try:
        sock.sendall(f"GET /other.html HTTP/1.0\r\nHost: {HOST}\r\n\r\n".encode())
        status, fields, body = read_answer(sock, False)
        assert status == 200 and body == PAGE and ("Connection", "close") in fields
        assert sock.recv(10) == b""
    finally:
        sock.close()


def test_a_purge_and_a_changed_object_are_seen_at_once(site):
    site.write("changing.html", b"first\n")
    site.warm("/changing.html")
    for _ in range(4):
        assert site.ask("/changing.html")[2] == b"first\n"
    site.write("changing.html", b"second\n")
    assert site.ask("/changing.html")[2] == b"first\n"   # cached until purged, as before
    purged = site.admin.post("/api/purge", {"urls": [f"http://{HOST}/changing.html"]})
    assert purged.status == 200 and purged.json["purged"] >= 1
    answer = site.ask("/changing.html")
    assert answer[2] == b"second\n" and field(answer, "X-Cache") == "MISS"
    for _ in range(4):
        assert site.ask("/changing.html")[2] == b"second\n"


def test_a_rule_change_is_seen_at_once(site):
    site.warm("/hdr/page.html")
    for _ in range(4):
        assert field(site.ask("/hdr/page.html"), "X-Version") == "1"
    assert site.admin.put(f"/api/rules/{site.rules['/hdr/']}", {"headers": {"X-Version": "2"}}).status == 200
    assert field(site.ask("/hdr/page.html"), "X-Version") == "2"
    assert site.admin.put(f"/api/rules/{site.rules['/hdr/']}", {"enabled": False}).status == 200
    assert site.ask("/hdr/page.html")[0] == 404
    assert site.admin.put(f"/api/rules/{site.rules['/hdr/']}", {"enabled": True}).status == 200


def test_age_grows_and_an_expired_entry_is_filled_again(site):
    site.write("short.html", b"short-lived\n")
    site.warm("/short/short.html")
    before, seen = site.again(), []
    started = time.monotonic()
    while time.monotonic() - started < 4.5:
        answer = site.ask("/short/short.html")
        seen.append((int(field(answer, "Age") or 0), field(answer, "X-Cache"), time.monotonic()))
        time.sleep(0.02)
    assert site.again() - before >= len(seen) // 2
    ages = [age for age, _, _ in seen]
    assert max(ages) == 1 and min(ages) == 0   # cache_ttl 2: Age 0, 1, then a new entry's 0
    fills = [n for n, (_, cache, _) in enumerate(seen) if cache == "MISS"]
    assert len(fills) >= 2, "the entry expired at least twice and was filled again"
    for n in range(1, len(seen)):
        if n not in fills:
            assert ages[n] >= ages[n - 1], "Age never goes back within one entry"


def test_answers_given_again_are_counted(site):
    site.write("counted.html", PAGE)
    site.warm("/counted.html")
    fields = [("User-Agent", "counter/1.0"), ("Referer", "https://ref.example.test/a")]
    admin = site.node.client()
    assert admin.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 200
    cursor = admin.get("/api/traffic/tail").json["next_after"]
    requests_before = sample(scrape(site.node), "contentnode_http_requests_total", port="public", method="GET",
                             status="200")
    lines_before = site.node.log().count("path=/counted.html ")
    again_before = site.again()
    traffic_before = traffic_counts(admin)
    for _ in range(40):
        assert site.ask("/counted.html", fields)[2] == PAGE
    traffic_after = traffic_counts(admin)   # the first read after the answers: each counted already
    assert {name: traffic_after[name] - traffic_before[name] for name in traffic_after} == dict(
        requests=40, bytes_out=40 * len(PAGE), cache_hits=40, cache_misses=0, errors_4xx=0, errors_5xx=0)
    assert site.again() - again_before >= 30
    assert sample(scrape(site.node), "contentnode_http_requests_total", port="public", method="GET",
                  status="200") - requests_before == 40
    assert wait_until(lambda: site.node.log().count("path=/counted.html ") - lines_before == 40, 5)
    lines = [line for line in site.node.log().splitlines() if "path=/counted.html " in line][-40:]
    assert all("cache=HIT ua=counter/1.0" in line and "client=127.0.0.1" in line for line in lines), lines[-1]
    assert len({line.split(" bytes=")[1].split()[0] for line in lines}) == 1   # the same head and body each time

    def tail_rows():
        return [row for row in admin.get(f"/api/traffic/tail?after={cursor}&domain={HOST}").json["requests"]
                if row["path"] == "/counted.html"]
    assert wait_until(lambda: len(tail_rows()) == 40, 10), len(tail_rows())
    assert {tuple((name, value) for name, value in row.items() if name not in ("time", "id")) for row in tail_rows()} == {
        (("domain", HOST), ("method", "GET"), ("path", "/counted.html"), ("status", 200), ("bytes", len(PAGE)),
         ("cache", "hit"), ("client", "127.0.0.0/24"), ("referer", "ref.example.test"), ("country", None))}, \
        tail_rows()[-1]   # client_addresses shapes the client; every answer's row the same as the pipeline's


def traffic_counts(admin) -> dict:
    """HOST's traffic counters over the last hour (GET /api/metrics)."""
    points = admin.get(f"/api/metrics?range=1h&domain={HOST}").json["points"]
    return {name: sum(point[name] for point in points) for name in points[0] if name != "t"}


def test_an_answer_given_again_writes_the_pipelines_access_line(site):
    """The access line of an answer given again (its fixed parts kept with it, logs.py access_line)
    is the one the pipeline writes for the same request, escapes and all, but its duration."""
    site.warm("/page.html", [("Accept-Encoding", "gzip")])
    marker = f"line/{next(_probes)}"
    fields = [("User-Agent", f'{marker} "quoted" back\\slash \xe9'), ("Accept-Encoding", "gzip")]
    path = "/page.html?sig=kept-out"
    again_before = site.again()
    answers = [site.ask(path, fields, probe=True)] + [site.ask(path, fields) for _ in range(6)]
    assert site.again() - again_before >= 3
    assert all(shape(answer) == shape(answers[0]) for answer in answers)
    assert wait_until(lambda: len(_lines_of(site, marker)) == 7, 5), _lines_of(site, marker)
    lines = _lines_of(site, marker)
    assert {int(line.split(" bytes=")[1].split()[0]) for line in lines} <= {len(_sent(a)) for a in answers}
    lines = {re.sub(r" bytes=\d+ duration_ms=[0-9.]+ ", " bytes=- duration_ms=- ", line.split(" contentnode.access: ")[1])
             for line in lines}   # the Age may turn between two answers: then its head's length too
    assert lines == {f"port=public host={HOST} client=127.0.0.1 method=GET path=/page.html status=200 "
                     f'bytes=- duration_ms=- cache=HIT ua="{marker} \\"quoted\\" back\\\\slash \\xe9"'}, lines


def _lines_of(site, marker: str) -> list:
    return [line for line in site.node.log().splitlines() if "contentnode.access:" in line and marker in line]


def _sent(answer) -> bytes:
    """The answer's bytes as sent: the status line, its fields, the blank line and the body."""
    status, fields, body = answer
    head = f"HTTP/1.1 {status} OK\r\n" + "".join(f"{n}: {v}\r\n" for n, v in fields) + "\r\n"
    return head.encode("latin-1") + body


def test_a_gzip_answer_given_again_decodes(site):
    site.warm("/page.html", [("Accept-Encoding", "gzip")])
    for _ in range(3):
        status, fields, body = site.ask("/page.html", [("Accept-Encoding", "gzip")])
        assert status == 200 and dict(fields)["Content-Encoding"] == "gzip" and gzip.decompress(body) == PAGE


def test_kinds_asked_in_turn_each_get_their_own_answer(site):
    """Every kind's key holds its own answer: asked in turn, each is its pipeline answer."""
    references = []
    for path, fields, method, *version in KINDS:
        site.warm(path, fields)
        references.append(site.ask(path, fields, method, probe=True, version=(version or ["HTTP/1.1"])[0]))
    before = site.again()
    for _ in range(3):
        for (path, fields, method, *version), reference in zip(KINDS, references):
            answer = site.ask(path, fields, method, version=(version or ["HTTP/1.1"])[0])
            assert shape(answer) == shape(reference)
            status, coding, length = expected(path, fields, method)
            assert (answer[0], field(answer, "Content-Encoding")) == (status, coding)
            assert length is None or len(answer[2]) == length
    assert site.again() - before >= len(KINDS)


def expected(path: str, fields, method: str) -> tuple:
    """(status, Content-Encoding, body length) the pipeline gives a kind of KINDS, from its request; the
    length None where it is the node's compressor's."""
    asked = dict(fields)
    if asked.get("If-Modified-Since", "").endswith("2100 00:00:00 GMT"):
        return 304, None, 0
    if asked.get("Range") == "bytes=0-99":
        return 206, None, 100
    accepted = asked.get("Accept-Encoding", "")
    coding = None if path.startswith("/blob") else "br" if "br" in accepted else "gzip" if "gzip" in accepted else None
    if method == "HEAD":
        return 200, coding, 0
    return 200, coding, None if coding else len(BLOB if path.startswith("/blob") else PAGE)


def test_the_age_follows_the_node_clock(site):
    """The node's clock moved (a test clock: the Date second stays) changes the next Age at once."""
    site.write("aged.html", b"aged\n")
    site.warm("/aged.html")
    try:
        for shift in (100, 200, 300):
            for _ in range(3):
                site.ask("/aged.html")
            site.node.set_clock_offset(shift)
            assert int(field(site.ask("/aged.html"), "Age")) >= shift
        site.node.set_clock_offset(4000)   # past the rule's cache_ttl (3600): filled again
        assert field(site.ask("/aged.html"), "X-Cache") == "MISS"
    finally:
        site.node.set_clock_offset(0)


def age_lag(site, path: str) -> int:
    """How often, over 24 small steps of the node's clock (0.3 s each, the Date second mostly the
    same), an answer given again showed another Age than the pipeline's asked just before it: at
    most once by chance (the Age turning between the two), more often when a prepared answer
    outlives its Age."""
    for _ in range(3):
        site.ask(path)
    lags = 0
    try:
        for step in range(1, 25):
            site.node.set_clock_offset(step * 0.3)
            piped = site.ask(path, probe=True)
            given = site.ask(path)
            lags += field(piped, "Age") != field(given, "Age")
    finally:
        site.node.set_clock_offset(0)
    return lags


def test_an_answer_given_again_never_outlives_its_age(site):
    site.write("stepped.html", b"stepped\n")
    site.warm("/stepped.html")
    assert age_lag(site, "/stepped.html") <= 1
