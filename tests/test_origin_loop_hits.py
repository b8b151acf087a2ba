"""Hits of rules in cache_mode "origin" answered by the public listener's loop thread
(docs/ARCHITECTURE.md, "Connection handling"): a stored answer held in memory that needs no origin
request, sent as stored or as its compressed variant held beside it, is answered without a pool
thread, as a hit held in memory of a fixed-TTL rule is. Against the real daemon on loopback with
the scripted origin; the one pool thread is held by a request the origin answers slowly."""

import contextlib
import gzip
import socket
import threading
import time

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.origin_server import OriginServer
from tests.test_origin_cache import HOST, fetch, shared_site

CSS = b"body { color: black; }\n" * 400
GZ = {"Accept-Encoding": "gzip"}


def _hold_the_pool(port: int, seconds: float) -> threading.Thread:
    """A request from another client address the origin answers after `seconds`: it holds the
    node's one pool thread meanwhile."""
    def run():
        with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=("127.0.0.3", 0)) as sock:
            sock.sendall(f"GET /slow HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            while sock.recv(65536):
                pass
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@contextlib.contextmanager
def _one_thread_site(tmp_path):
    """(node, origin): a node with one pool thread, its rule on the origin in cache_mode "origin",
    the origin's /slow answered after 4 s."""
    with OriginServer() as origin:
        node = Node(str(tmp_path), env={"CONTENTNODE_PUBLIC_THREADS": "1"}).start()
        try:
            admin = node.client()
            assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
            shared_site(admin, origin)
            origin.script("/slow", b"slow", headers={"Cache-Control": "no-store"}, delay=4.0)
            yield node, origin
        finally:
            node.close()


def test_origin_hits_held_in_memory_answered_while_the_pool_thread_waits(tmp_path):
    with _one_thread_site(tmp_path) as (node, origin):
        origin.script("/s.css", CSS, headers={"Cache-Control": "max-age=300", "Content-Type": "text/css"},
                      etag='"c1"')
        origin.script("/cold", b"cold", headers={"Cache-Control": "max-age=300"})
        for headers in (None, GZ):   # filled (or compressed), hit from its file, hit from memory
            for _ in range(3):
                assert fetch(node.public_port, "/s.css", headers)[0] == 200
        slow = _hold_the_pool(node.public_port, 4.0)
        time.sleep(1.0)   # the pool thread waits on the origin
        for headers, coding in ((None, None), (GZ, "gzip")):
            started = time.monotonic()
            status, answer, got = fetch(node.public_port, "/s.css", headers)
            assert time.monotonic() - started < 1.0, coding
            assert status == 200 and answer.get("content-encoding") == coding
            assert (gzip.decompress(got) if coding else got) == CSS
            assert answer["cache-status"].startswith("contentnode; hit; ttl=")
            assert answer["vary"] == "Accept-Encoding" and int(answer["age"]) >= 0
        started = time.monotonic()
        status, answer, got = fetch(node.public_port, "/cold")   # not stored: it waits for the pool
        assert status == 200 and got == b"cold" and time.monotonic() - started > 1.0
        slow.join(30)
        assert len(origin.requests_for("/s.css")) == 1 and len(origin.requests_for("/slow")) == 1


def test_vary_variants_and_queries_held_in_memory_answered_while_the_pool_thread_waits(tmp_path):
    """The loop thread finds a held Vary variant by the request fields its Vary names, and a kept
    query under a key of its own; a variant not stored, or a request whose own directives refuse
    the stored answer, goes to the origin."""
    with _one_thread_site(tmp_path) as (node, origin):
        origin.script("/v", b"varied", headers={"Cache-Control": "max-age=300", "Vary": "Accept-Language"})
        asks = [("/v", "en"), ("/v", "fr"), ("/v?page=2", "en")]
        for path, lang in asks:   # filled, hit from its file, hit from memory
            for _ in range(3):
                assert fetch(node.public_port, path, {"Accept-Language": lang})[0] == 200
        slow = _hold_the_pool(node.public_port, 4.0)
        time.sleep(1.0)   # the pool thread waits on the origin
        for path, lang in asks:
            started = time.monotonic()
            status, answer, got = fetch(node.public_port, path, {"Accept-Language": lang})
            assert time.monotonic() - started < 1.0, (path, lang)
            assert status == 200 and got == b"varied"
            assert answer["cache-status"].startswith("contentnode; hit; ttl="), (path, lang)
        started = time.monotonic()
        status, answer, got = fetch(node.public_port, "/v", {"Accept-Language": "de"})
        assert status == 200 and got == b"varied" and time.monotonic() - started > 1.0
        assert "fwd=vary-miss" in answer["cache-status"]
        slow.join(30)
        status, answer, _ = fetch(node.public_port, "/v", {"Accept-Language": "en", "Cache-Control": "max-age=0"})
        assert status == 200 and "; hit" not in answer["cache-status"]
        assert [(seen.target, seen.headers["accept-language"]) for seen in origin.requests_for("/v")] == [
            ("/v", "en"), ("/v", "fr"), ("/v?page=2", "en"), ("/v", "de"), ("/v", "en")]
