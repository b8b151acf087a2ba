"""HTTPS answers the public listener's loop thread makes itself (docs/ARCHITECTURE.md, "Connection handling").

Once a TLS connection is handshaken, its requests are read and answered as plain ones are: a hit
held in memory on the loop thread (non-blocking TLS reads and writes), anything else on a pool
thread. The plain listener's tests run here over TLS (this module's `site` connects over TLS):
pipelined requests answered in order, records the socket does not take at once finished by a pool
thread (OpenSSL's kept record written again), a head in two records parked between them. Then a
trickled TLS head is cut at header_timeout, and a kept-alive TLS connection gets a hit while every
pool thread is held.

Against the real daemon on loopback; 127.0.0.2 and up are other client addresses.
"""

import socket
import ssl
import time

import pytest

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.test_public_loop_answers import (HEADER_TIMEOUT, HOST, SMALL, Site, assert_answered_at_once, get, pool_held,
                                            read_answers, warmed_site)
from tests.test_public_loop_answers import (  # noqa: F401  (collected here, run over TLS)
    test_a_head_sent_in_two_parts_then_kept_alive_past_header_timeout,
    test_answers_the_socket_does_not_take_at_once_arrive_whole,
    test_pipelined_hits_misses_and_refusals_answered_in_order)

pytestmark = pytest.mark.daemon_process



class TlsSite(Site):
    """The loop-answers site, with a certificate for HOST and the HTTPS listener on; connect() is over TLS."""

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

    def connect(self, source: str = "127.0.0.1", rcvbuf: int | None = None) -> ssl.SSLSocket:
        sock = socket.socket()
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(10)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", self.https_port))
        return self.tls.wrap_socket(sock, server_hostname=HOST)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    yield from warmed_site(tmp_path_factory, TlsSite, "tlsloop")


def test_tls_trickled_head_cut_at_header_timeout(site):
    """Half a head over TLS and nothing more: closed at header_timeout, holding no thread meanwhile."""
    with site.connect() as sock:
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
        with site.connect(source="127.0.0.2") as tls:
            tls.sendall(get("/small.txt"))
            assert read_answers(tls, 1)[0][2] == SMALL   # handshaken (in the pool) and kept alive

            def ask(path):
                tls.sendall(get(path))
                [(status, _, answer)] = read_answers(tls, 1)
                return status, answer

            with pool_held(site):
                assert_answered_at_once(ask)
    finally:
        site.node.close()
