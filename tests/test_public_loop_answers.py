"""Answers the public listener's loop thread makes itself (docs/ARCHITECTURE.md, "Connection handling").

A request whose answer needs no wait (a hit held in memory, a refusal, /healthz) is answered on
the loop thread; any other goes on where it stopped on a pool thread. Pipelined requests
mixing both are answered in order, an answer the socket does not take at once arrives whole, and
a hit is answered while every pool thread is held by a slow reader.

Against the real daemon on loopback; 127.0.0.2 and up are other client addresses.
"""

import contextlib
import os
import socket
import time

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

pytestmark = pytest.mark.daemon_process

HOST = "loop.example.test"
SMALL = b"a small page, answered from memory once hit\n" * 20
MID = os.urandom(60 * 1024)           # held in memory (at most 64 KiB), more than a small socket takes
BIG = os.urandom(1 << 20) * 16        # never held in memory: sendfile on a pool thread


class Site:
    """A node with a folder bucket under HOST: small.txt, mid.bin, big.bin and cold-N.txt files."""

    def __init__(self, workdir: str, env=None):
        root = os.path.join(workdir, "root", "site")
        os.makedirs(root)
        files = {"small.txt": SMALL, "mid.bin": MID, "big.bin": BIG}
        files.update({f"cold-{n}.txt": b"cold %d\n" % n for n in range(8)})
        for name, body in files.items():
            with open(os.path.join(root, name), "wb") as f:
                f.write(body)
        self.node = Node(workdir, env={"CONTENTNODE_FOLDER_ROOTS": os.path.dirname(root), **(env or {})}).start()
        admin = self.node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        assert admin.post("/api/domains", {"host": HOST}).status == 201
        bucket = admin.post("/api/buckets", {"name": "site", "type": "folder", "path": root})
        assert bucket.status == 201, bucket.body
        rule = admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket.json["id"]})
        assert rule.status == 201, rule.body

    def connect(self, source: str = "127.0.0.1", rcvbuf: int | None = None) -> socket.socket:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", self.node.public_port))
        return sock

    def warm(self, *paths: str) -> None:
        """Each path asked three times: filled, hit from its file (then kept in memory), hit from memory."""
        with self.connect() as sock:
            for path in paths:
                for _ in range(3):
                    sock.sendall(get(path))
                    [(status, headers, _)] = read_answers(sock, 1)
                    assert status == 200
            assert headers["x-cache"] == "HIT"


def get(path: str, host: str = HOST, close: bool = False) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n").encode()


def read_answers(sock, count: int) -> list:
    """`count` answers read off sock in order: (status, headers by lower-case name, body)."""
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            buffer += _more(sock)
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            buffer += _more(sock)
        answers.append((int(lines[0].split()[1]), headers, buffer[:length]))
        buffer = buffer[length:]
    assert buffer == b"", "nothing follows the answers asked for"
    return answers


def _more(sock) -> bytes:
    chunk = sock.recv(1 << 20)
    assert chunk, "the connection closed before the answers were whole"
    return chunk


HEADER_TIMEOUT = 2.0


def warmed_site(tmp_path_factory, site_class, name: str):
    """A module's site (plain or TLS) under a short header_timeout, /small.txt and /mid.bin held in
    memory; its node closed after the module."""
    instance = site_class(str(tmp_path_factory.mktemp(name)), env={"CONTENTNODE_HEADER_TIMEOUT": str(HEADER_TIMEOUT)})
    instance.warm("/small.txt", "/mid.bin")
    yield instance
    instance.node.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    yield from warmed_site(tmp_path_factory, Site, "loopsite")


def test_pipelined_hits_misses_and_refusals_answered_in_order(site):
    """One packet of requests: hits held in memory (the loop thread's), misses (a pool thread's),
    /healthz, a 404 and a 400; every answer in order, and the connection closed after the last."""
    requests = [get("/small.txt"), get("/cold-0.txt"), get("/healthz"), get("/small.txt"), get("/nothing-here"),
                get("/cold-1.txt"), get("/small.txt", host="unknown.example.test"), get("/mid.bin"),
                b"GET /small.txt HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\nRange: bytes=0-4\r\n\r\n",
                get("/small.txt", close=True)]
    with site.connect() as sock:
        sock.sendall(b"".join(requests))
        answers = read_answers(sock, len(requests))
        assert sock.recv(1) == b""   # closed after the Connection: close answer
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 404, 200, 404, 200, 206, 200]
    bodies = [body for _, _, body in answers]
    assert bodies[0] == bodies[3] == bodies[9] == SMALL
    assert bodies[1] == b"cold 0\n" and bodies[5] == b"cold 1\n"
    assert bodies[7] == MID and bodies[8] == SMALL[:5]
    assert b'"status":"ok"' in bodies[2]
    assert [answers[n][1]["x-cache"] for n in (0, 1, 3, 5, 7, 9)] == ["HIT", "MISS", "HIT", "MISS", "HIT", "HIT"]
    assert answers[9][1]["connection"] == "close"


def test_a_deferred_request_keeps_its_keep_alive_decision(site):
    """A miss the loop thread parsed and handed to a pool thread (Deferred) is served from that head,
    with its keep-alive decision: Connection: close and plain HTTP/1.0 close after it (the request
    pipelined behind is never answered), HTTP/1.0 with keep-alive serves the next one."""
    host = HOST.encode()
    for head, kept_open in ((get("/cold-2.txt", close=True), False),
                            (b"GET /cold-3.txt HTTP/1.0\r\nHost: " + host + b"\r\n\r\n", False),
                            (b"GET /cold-4.txt HTTP/1.0\r\nHost: " + host + b"\r\nConnection: Keep-Alive\r\n\r\n", True)):
        with site.connect() as sock:
            sock.sendall(head + get("/small.txt"))
            answers = read_answers(sock, 2 if kept_open else 1)
            if not kept_open:
                assert sock.recv(1) == b"", head
        status, headers, body = answers[0]
        assert (status, headers["x-cache"], body) == (200, "MISS", b"cold %s\n" % head[10:11]), head
        assert [answer[0] for answer in answers[1:]] == ([200] if kept_open else [])
        assert kept_open == (headers.get("connection") != "close"), headers



def test_a_deferred_request_with_a_body_closes_after_its_answer(site):
    """A miss that announces a body, which the public port never reads, is deferred to a pool
    thread that goes on with it where the loop thread stopped: the connection still closes after
    its answer, so the body is never taken for a request (here one smuggled in it)."""
    smuggled = get("/small.txt")
    head = (f"GET /cold-5.txt HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: {len(smuggled)}\r\n\r\n").encode()
    with site.connect() as sock:
        sock.sendall(head + smuggled)
        [(status, headers, body)] = read_answers(sock, 1)
        assert sock.recv(1) == b""   # closed: the smuggled request is never answered
    assert (status, headers["x-cache"], body) == (200, "MISS", b"cold 5\n")
    assert headers["connection"] == "close"

def test_a_head_sent_in_two_parts_then_kept_alive_past_header_timeout(site):
    """A head whose second half comes later is answered from memory; its connection is then an
    idle kept-alive one, not an unfinished head closed at header_timeout."""
    request = get("/small.txt")
    with site.connect() as sock:
        sock.sendall(request[:20])
        time.sleep(0.5)   # parked with the first half, under header_timeout
        sock.sendall(request[20:])
        assert read_answers(sock, 1)[0][2] == SMALL
        time.sleep(HEADER_TIMEOUT + 1.0)
        sock.sendall(request)
        [(status, headers, body)] = read_answers(sock, 1)
    assert status == 200 and body == SMALL and headers["x-cache"] == "HIT"


def test_answers_the_socket_does_not_take_at_once_arrive_whole(site):
    """Twenty 60 KiB hits pipelined to a client with a small receive buffer that reads nothing for
    a while: what the socket did not take is sent on by a pool thread, in order, whole."""
    with site.connect(rcvbuf=4096) as sock:
        sock.sendall(get("/mid.bin") * 19 + get("/small.txt"))
        time.sleep(0.5)
        answers = read_answers(sock, 20)
        sock.sendall(get("/small.txt"))   # the connection is kept alive after
        assert read_answers(sock, 1)[0][2] == SMALL
    assert all(status == 200 and body == MID for status, _, body in answers[:19])
    assert answers[19][2] == SMALL


def test_hits_answered_while_every_pool_thread_is_busy(tmp_path):
    """A node with one pool thread: a client that asks for 16 MB and reads nothing holds it; a hit
    held in memory is still answered at once to another client, and /healthz too."""
    site = Site(str(tmp_path), env={"CONTENTNODE_PUBLIC_THREADS": "1"})
    try:
        site.warm("/small.txt")

        def ask(path):
            with site.connect(source="127.0.0.2") as sock:
                sock.sendall(get(path))
                [(status, _, answer)] = read_answers(sock, 1)
            return status, answer

        with pool_held(site):
            assert_answered_at_once(ask)
    finally:
        site.node.close()


@contextlib.contextmanager
def pool_held(site):
    """The one pool thread sending 16 MB to a client that reads nothing (a 4 KiB receive buffer)."""
    with site.connect(source="127.0.0.3", rcvbuf=4096) as stuck:
        stuck.sendall(get("/big.bin"))
        time.sleep(1.0)   # the pool thread is sending into a full socket
        yield
        stuck.settimeout(0.2)
        assert stuck.recv(65536).startswith(b"HTTP/1.1 200")   # the big one is being sent all along


def assert_answered_at_once(ask):
    """`ask(path)` -> (status, body): a hit held in memory and /healthz, each answered within 1 s."""
    for path, body in (("/small.txt", SMALL), ("/healthz", None)):
        started = time.monotonic()
        status, answer = ask(path)
        assert status == 200 and (body is None or answer == body)
        assert time.monotonic() - started < 1.0, path


def test_hits_answered_from_memory_are_counted_once_per_entry_they_answer_from(site):
    """A hit the loop thread answers counts as a pool thread's would: once per cache entry it answers
    from, so a compressed answer counts its identity entry and its variant, a plain one its entry."""
    admin = site.node.client()
    assert admin.login(ADMIN_USER, ADMIN_PASSWORD).status == 200

    def hits() -> int:
        return sum(process["hits"] for process in admin.get("/api/cache").json["processes"])

    zipped = get("/small.txt").replace(b"\r\n\r\n", b"\r\nAccept-Encoding: gzip\r\n\r\n")
    with site.connect() as sock:
        for _ in range(3):   # the variant filled, hit from its file (then kept in memory), hit from memory
            sock.sendall(zipped)
            read_answers(sock, 1)
        before = hits()
        sock.sendall(get("/small.txt") * 3 + zipped * 4)
        answers = read_answers(sock, 7)
    assert [status for status, _, _ in answers] == [200] * 7
    assert [headers.get("content-encoding") for _, headers, _ in answers] == [None] * 3 + ["gzip"] * 4
    assert [headers["x-cache"] for _, headers, _ in answers] == ["HIT"] * 7
    assert hits() - before == 3 + 2 * 4
