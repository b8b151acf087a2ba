"""core/http_origin.py against the scripted origin: keep-alive reuse, streaming, forward, TLS, limits."""

import socket
import threading
import time

import pytest

from contentnode.core import http_pool, netguard
from contentnode.core.http_origin import HttpOrigin, HttpOriginConfig
from contentnode.core.http_pool import OriginPools
from contentnode.core.origin import OriginError
from tests import certgen
from tests.origin_server import OriginServer, free_port, http_bucket_record

POLICY = netguard.OutboundPolicy()
CRLF = b"\r\n"


def origin_for(url, pools=None, **fields):
    return HttpOrigin(HttpOriginConfig.from_record(http_bucket_record(url, **fields)), pools or OriginPools(), POLICY)


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


def test_get_streams_and_reuses_one_connection(origin):
    origin.script("/base/a%20b.txt", b"x" * 300_000, headers={"Content-Type": "text/plain"}, etag='"e1"')
    client = origin_for(origin.url + "/base/")
    for _ in range(3):
        answer = client.open("a b.txt")
        assert answer.status == 200 and answer.length == 300_000
        assert answer.meta["etag"] == '"e1"' and answer.meta["content_type"] == "text/plain"
        assert sum(len(c) for c in answer.chunks) == 300_000
        answer.close()
    assert [s.target for s in origin.requests_for("/base/a%20b.txt")] == ["/base/a%20b.txt"] * 3
    assert origin.connections == 1
    assert (client.pool.opened, client.pool.reused) == (1, 2)


def test_conditional_forward_and_host_policy(origin):
    origin.script("/v.txt", b"body", etag='"v1"', last_modified=1_700_000_000)
    client = origin_for(origin.url, host_header="client")
    answer = client.forward("GET", "v.txt", "a=1&b=2", {"If-None-Match": '"v1"', "Connection": "x-secret",
                                                       "X-Secret": "kept"}, client_host="shop.example.test")
    assert answer.status == 304 and answer.read() == b""
    answer.close()
    seen = origin.requests_for("/v.txt")[0]
    assert seen.target == "/v.txt?a=1&b=2"
    assert seen.headers["host"] == "shop.example.test" and seen.headers["x-secret"] == "kept"
    assert "keep-alive" not in seen.headers.get("connection", "") and seen.headers["user-agent"] == "contentnode"
    named = origin_for(origin.url, host_header="www.example.test")
    named.forward("HEAD", "v.txt").close()
    assert origin.requests_for("/v.txt")[-1].headers["host"] == "www.example.test"
    assert origin_for(origin.url).config.host_for("x") == f"127.0.0.1:{origin.port}"


def test_forward_streams_a_chunked_body(origin):
    origin.script("/post", b"ok")
    pieces = (b"p" * 10_000 for _ in range(10))
    answer = origin_for(origin.url).forward("POST", "post", body=pieces)
    assert (answer.status, answer.read()) == (200, b"ok")
    seen = origin.requests_for("/post")[0]
    assert seen.body_length == 100_000 and seen.headers["transfer-encoding"] == "chunked"


def test_a_kept_connection_the_origin_closed_is_replaced(origin):
    origin.script("/k", b"k")
    client = origin_for(origin.url)
    client.open("k").close()
    answer = client.open("k")
    list(answer.chunks)
    answer.close()
    origin.stop()
    origin.start()   # the kept connection is dead now
    answer = client.open("k")
    assert b"".join(answer.chunks) == b"k"
    answer.close()


def test_dead_origin_fails_fast_and_releases_its_slot():
    client = origin_for(f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    for _ in range(http_pool.MAX_ACTIVE + 5):
        with pytest.raises(OriginError) as caught:
            client.open("x")
        assert caught.value.code == "connect"
    assert time.monotonic() - started < 5


def test_a_slow_origin_holds_only_its_share(origin):
    origin.script("/slow", b"s", delay=3)
    client = origin_for(origin.url, connect_timeout=1)
    errors, done = [], []

    def one():
        try:
            client.open("slow").close()
            done.append(1)
        except OriginError as exc:
            errors.append(exc.code)

    threads = [threading.Thread(target=one) for _ in range(http_pool.MAX_ACTIVE + http_pool.MAX_WAITING + 10)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    assert errors.count("busy") == 10   # beyond the share: refused at once
    for t in threads:
        t.join(15)
    assert len(done) == http_pool.MAX_ACTIVE, errors
    assert errors.count("busy") == http_pool.MAX_WAITING + 10


def test_read_timeout_is_per_read_not_per_answer(origin):
    origin.script("/trickle", b"t" * 60_000, rate=40_000)   # 1.5 s in all, a piece every 50 ms
    answer = origin_for(origin.url, read_timeout=0.5).open("trickle")
    assert sum(len(c) for c in answer.chunks) == 60_000
    origin.script("/stuck", b"z", delay=2)
    with pytest.raises(OriginError) as caught:
        origin_for(origin.url, read_timeout=0.5).open("stuck")
    assert caught.value.code == "timeout"


def test_own_ports_and_link_local_refused_at_connect():
    refusing = netguard.OutboundPolicy(own_ports=frozenset({8123}))
    client = HttpOrigin(HttpOriginConfig.from_record(http_bucket_record("http://127.0.0.1:8123")), OriginPools(), refusing)
    with pytest.raises(OriginError) as caught:
        client.open("x")
    assert caught.value.code == "refused_address" and "loop" in caught.value.message
    with pytest.raises(OriginError) as caught:
        origin_for("http://169.254.169.254").open("latest/meta-data")
    assert caught.value.code == "refused_address" and "link-local" in caught.value.message


@pytest.fixture
def tls_origin(tmp_path):
    cert, key = certgen.make_leaf(["origin.example.test"], ips=["127.0.0.1"])
    (tmp_path / "c.pem").write_text(certgen.cert_pem(cert))
    (tmp_path / "k.pem").write_text(certgen.key_pem(key))
    with OriginServer(tls=(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))) as server:
        yield server


def whole_body(client, path: str) -> bytes:
    """A GET's whole body, its answer closed after (its connection given back, or not)."""
    answer = client.forward("GET", path)
    try:
        return b"".join(answer.chunks())
    finally:
        answer.close()


@pytest.mark.parametrize("over", ["plain", "tls"])
def test_a_connection_is_reused_after_a_chunked_answer_unless_bytes_follow_its_end(origin, tls_origin, over):
    """After a chunked body the connection is looked at without waiting (over TLS too): nothing
    more, it is reused; bytes past the last chunk, it is closed, and the next answer is the origin's."""
    server = origin if over == "plain" else tls_origin
    server.script("/c", b"chunky", chunked=True)
    server.script("/d", b"chunky", chunked=True, after=b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\njunk")
    client = origin_for(server.url, tls_verify=False)

    def body(path):
        return whole_body(client, path)

    assert [body("c"), body("c")] == [b"chunky", b"chunky"] and server.connections == 1
    assert [body("d"), body("c")] == [b"chunky", b"chunky"] and server.connections == 2


def test_a_tls_connection_with_bytes_that_are_no_record_after_an_answer_is_not_reused(tls_origin):
    """Bytes after a chunked answer that TLS cannot read (a record's header of junk: the look
    fails, it does not just find nothing): the connection is closed, and the next request goes on
    a new one (it was reused before, and the next request failed, "EOF in violation of protocol")."""
    tls_origin.script("/c", b"chunky", chunked=True)
    tls_origin.script("/e", b"chunky", chunked=True, after_raw=b"junk!")
    client = origin_for(tls_origin.url, tls_verify=False)

    def body(path):
        return whole_body(client, path)

    assert body("e") == b"chunky"
    assert body("c") == b"chunky" and tls_origin.connections == 2


def test_tls_verification_and_session_resumption(tls_origin):
    tls_origin.script("/t", b"tls", headers={"Connection": "close"})
    with pytest.raises(OriginError) as caught:
        origin_for(tls_origin.url).open("t")
    assert caught.value.code == "tls" and "not trusted" in caught.value.message
    client = origin_for(tls_origin.url, tls_verify=False)
    for _ in range(3):
        answer = client.open("t")
        assert b"".join(answer.chunks) == b"tls"
        answer.close()
    assert tls_origin.connections == 3 and tls_origin.tls_resumed == 2 and client.pool.resumed == 2
    report = client.check()
    assert report["ok"], report
    assert [s["name"] for s in report["steps"]] == ["resolve", "connect", "tls", "request"]
    assert "NOT verified" in report["steps"][2]["detail"] and "origin.example.test" in report["steps"][2]["detail"]
    failed = origin_for(tls_origin.url).check()
    assert not failed["ok"] and failed["steps"][-1]["name"] == "tls"
    assert "self-signed" in failed["steps"][-1]["detail"] and "tls_verify false" in failed["steps"][-1]["detail"]


def test_check_falls_back_to_get_when_head_is_refused(origin):
    origin.script("/", b"not allowed", status=405)
    report = origin_for(origin.url).check()
    assert [s.method for s in origin.requests_for("/")] == ["HEAD", "GET"]   # over the one connection
    assert report["steps"][-1]["detail"].startswith("GET / answered 405") and report["ok"] is True
    origin.script("/", b"down", status=503)
    failed = origin_for(origin.url).check()
    assert failed["ok"] is False and failed["steps"][-1]["code"] == "status"


def _raw_origin(answers: list[bytes]):
    """A listener that answers each connection's first request with the next canned bytes, then
    closes it; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        for answer in answers:
            conn, _ = listener.accept()
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                conn.sendall(answer)
        listener.close()
    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_answers_are_read_strictly_by_their_framing():
    """core/origin_wire.py: interim answers set aside, chunked with trailers, a body ended by the
    close; a malformed head, an obs-folded field or a short body is a protocol error."""
    good = [b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"
            b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close"]
    client = origin_for(f"http://127.0.0.1:{_raw_origin(good)}")
    first = client.forward("GET", "x")
    assert (first.status, first.interim, first.length) == (200, [103], None)
    assert first.header("x-a") == "1" and first.header("link") is None and first.read(100) == b"hello"
    assert b"".join(first.chunks()) == b" world"
    first.close()
    second = client.forward("GET", "x")
    assert b"".join(second.chunks()) == b"until the close"
    second.close()
    bad = [b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n",
           b"HTTP/1.1 2000 OK\r\n\r\n",
           b"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n",
           b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n"]
    client = origin_for(f"http://127.0.0.1:{_raw_origin(bad)}")
    for _ in bad:
        with pytest.raises(OriginError) as refused:
            client.forward("GET", "x")
        assert refused.value.code == "protocol"
    short = origin_for(f"http://127.0.0.1:{_raw_origin([b'HTTP/1.1 200 OK' + CRLF + b'Content-Length: 10' + CRLF * 2 + b'abc'])}")
    answer = short.forward("GET", "x")
    assert answer.read(100) == b"abc"
    with pytest.raises(OriginError) as cut:
        answer.read(100)
    assert cut.value.code == "protocol" and short.pool.reused == 0


def _kept_alive_origin(answers: list[list[bytes]], pause: float) -> int:
    """A listener that answers the requests of one kept-alive connection in turn, each answer
    sent as the given pieces with `pause` seconds between them; its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        with conn, listener:
            for pieces in answers:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                for n, piece in enumerate(pieces):
                    if n:
                        time.sleep(pause)
                    conn.sendall(piece)
            conn.recv(1)   # until the client closes
    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_body_that_came_with_its_head_is_taken_at_once_and_its_connection_given_back():
    """OriginResponse.held_body: a small body read in the same read as its head is taken from the
    buffer, and the connection is back in the pool before the answer is sent on (the next request
    reuses it while the first answer is still held); a body that comes later is not waited for
    (None, nothing read) and streams whole."""
    body = bytes(range(256)) * 80   # 20 KB: one loopback segment with its head
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    client = origin_for(f"http://127.0.0.1:{_kept_alive_origin([[head + body], [head, body], [head + body]], 0.3)}")
    first = client.forward("GET", "a")
    assert first.held_body() == body
    second = client.forward("GET", "b")   # `first` is neither read further nor closed
    assert (client.pool.opened, client.pool.reused) == (1, 1)
    started = time.monotonic()
    assert second.held_body() is None and time.monotonic() - started < 0.2   # no wait for the late body
    assert b"".join(second.chunks()) == body
    second.close()
    third = client.forward("GET", "c")
    assert third.held_body() == body and (client.pool.opened, client.pool.reused) == (1, 2)
    first.close()
    third.close()
