"""HTTPS answers the public listener's loop thread makes itself (docs/ARCHITECTURE.md, "Connection handling").

Once a TLS connection is handshaken, its requests are read and answered as plain ones are: a hit
held in memory on the loop thread (non-blocking TLS reads and writes), anything else on a pool
thread. Pipelined requests are answered in order, records the socket does not take at once are
finished by a pool thread, a head in two records is parked between them, and a kept-alive TLS
connection gets a hit while every pool thread is held.

Against the real daemon on loopback; 127.0.0.2 and up are other client addresses.
"""

import socket
import ssl
import time

import pytest

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.test_public_loop_answers import HOST, MID, SMALL, Site, get, read_answers

pytestmark = pytest.mark.daemon_process

HEADER_TIMEOUT = 2.0


class TlsSite(Site):
    """The loop-answers site, with a certificate for HOST and the HTTPS listener on."""

    def __init__(self, workdir: str, env=None):
        super().__init__(workdir, env)
        ca_cert, ca_key = make_ca()
        cert, key = make_leaf([HOST], ca_cert, ca_key)
        admin = self.node.client()
        assert admin.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
        upload = admin.post("/api/certs/upload", {"host": HOST, "cert_pem": cert_pem(cert) + cert_pem(ca_cert),
                                                  "key_pem": key_pem(key)})
        assert upload.status == 200, upload.body
        self.https_port = admin.put("/api/https", {"enabled": True, "port": 0}).json["listening_port"]
        self.tls = ssl.create_default_context(cadata=cert_pem(ca_cert))

    def connect_tls(self, source: str = "127.0.0.1", rcvbuf: int | None = None) -> ssl.SSLSocket:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", self.https_port))
        return self.tls.wrap_socket(sock, server_hostname=HOST)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    instance = TlsSite(str(tmp_path_factory.mktemp("tlsloop")), env={"CONTENTNODE_HEADER_TIMEOUT": str(HEADER_TIMEOUT)})
    instance.warm("/small.txt", "/mid.bin")
    yield instance
    instance.node.close()


def test_pipelined_tls_requests_answered_in_order(site):
    """One write of requests over TLS: memory hits (the loop thread's), misses (a pool thread's),
    /healthz, a 404, a 60 KiB hit, a range; every answer in order, closed after the last."""
    requests = [get("/small.txt"), get("/cold-2.txt"), get("/healthz"), get("/small.txt"), get("/nothing-here"),
                get("/cold-3.txt"), get("/mid.bin"),
                b"GET /small.txt HTTP/1.1\r\nHost: " + HOST.encode() + b"\r\nRange: bytes=0-4\r\n\r\n",
                get("/small.txt", close=True)]
    with site.connect_tls() as sock:
        sock.sendall(b"".join(requests))
        answers = read_answers(sock, len(requests))
        assert sock.recv(1) == b""   # closed after the Connection: close answer
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 404, 200, 200, 206, 200]
    bodies = [body for _, _, body in answers]
    assert bodies[0] == bodies[3] == bodies[8] == SMALL
    assert bodies[1] == b"cold 2\n" and bodies[5] == b"cold 3\n"
    assert bodies[6] == MID and bodies[7] == SMALL[:5]
    assert [answers[n][1]["x-cache"] for n in (0, 1, 3, 5, 6, 8)] == ["HIT", "MISS", "HIT", "MISS", "HIT", "HIT"]


def test_tls_records_the_socket_does_not_take_at_once_arrive_whole(site):
    """Twenty 60 KiB hits pipelined over TLS to a client with a small receive buffer that reads
    nothing for a while: the records OpenSSL could not send at once are finished by a pool thread
    (the same record written again), in order, whole; the connection is kept alive after."""
    with site.connect_tls(rcvbuf=4096) as sock:
        sock.sendall(get("/mid.bin") * 19 + get("/small.txt"))
        time.sleep(0.5)
        answers = read_answers(sock, 20)
        sock.sendall(get("/small.txt"))
        assert read_answers(sock, 1)[0][2] == SMALL
    assert all(status == 200 and body == MID for status, _, body in answers[:19])
    assert answers[19][2] == SMALL


def test_tls_head_in_two_records_then_kept_alive_past_header_timeout(site):
    """A head whose second record comes later is parked between them and answered; the connection
    is then an idle kept-alive one, not an unfinished head closed at header_timeout."""
    request = get("/small.txt")
    with site.connect_tls() as sock:
        sock.sendall(request[:20])
        time.sleep(0.5)
        sock.sendall(request[20:])
        assert read_answers(sock, 1)[0][2] == SMALL
        time.sleep(HEADER_TIMEOUT + 1.0)
        sock.sendall(request)
        [(status, headers, body)] = read_answers(sock, 1)
    assert status == 200 and body == SMALL and headers["x-cache"] == "HIT"


def test_tls_trickled_head_cut_at_header_timeout(site):
    """Half a head over TLS and nothing more: closed at header_timeout, holding no thread meanwhile."""
    with site.connect_tls() as sock:
        sock.sendall(get("/small.txt")[:20])
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert HEADER_TIMEOUT - 0.5 < time.monotonic() - started < HEADER_TIMEOUT + 3


def test_tls_hit_answered_while_every_pool_thread_is_busy(tmp_path):
    """A node with one pool thread per listener: a TLS client that asks for 16 MB and reads nothing
    holds the HTTPS listener's; a kept-alive TLS connection still gets a hit held in memory, and
    /healthz, at once."""
    site = TlsSite(str(tmp_path), env={"CONTENTNODE_PUBLIC_THREADS": "1"})
    try:
        site.warm("/small.txt")
        with site.connect_tls(source="127.0.0.2") as tls:
            tls.sendall(get("/small.txt"))
            assert read_answers(tls, 1)[0][2] == SMALL   # handshaken (in the pool) and kept alive
            with site.connect_tls(source="127.0.0.3", rcvbuf=4096) as stuck:
                stuck.sendall(get("/big.bin"))
                time.sleep(1.0)   # the pool thread is sending into a full socket
                for path, body in (("/small.txt", SMALL), ("/healthz", None)):
                    started = time.monotonic()
                    tls.sendall(get(path))
                    [(status, _, answer)] = read_answers(tls, 1)
                    assert status == 200 and (body is None or answer == body)
                    assert time.monotonic() - started < 1.0, path
                stuck.settimeout(0.2)
                assert stuck.recv(65536).startswith(b"HTTP/1.1 200")   # the big one is being sent all along
    finally:
        site.node.close()
