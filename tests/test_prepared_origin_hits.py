"""Memory hits of a rule in cache_mode "origin" given again from a prepared answer (public/prepared.py),
against the real daemon and the scripted origin: each kind of request is asked once with a header
never sent before (the pipeline answers it) and then the same way several times (given again, as
contentnode_public_prepared_answers_total counts); every answer is the pipeline's but for Date and
Age. Age and Cache-Status follow the node's clock, a stale answer goes to the origin, an answer
chosen by a Vary is never given again, and the origin is asked once."""

import gzip
import socket

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.origin_server import OriginServer
from tests.test_origin_cache import HOST, shared_site
from tests.test_prepared_hits import KeptAlive, age_lag, field, shape

pytestmark = pytest.mark.daemon_process

CSS = b"body { color: black; }\n" * 450   # about 10 KB, compressible


class OriginSite(KeptAlive):
    """A node whose rule in cache_mode "origin" is on the scripted origin; one kept-alive connection."""

    host = HOST

    def __init__(self, workdir: str, origin: OriginServer):
        self.origin = origin
        self.node = Node(workdir).start()
        admin = self.node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        shared_site(admin, origin)
        origin.script("/s.css", CSS, headers={"Cache-Control": "max-age=300", "Content-Type": "text/css"},
                      etag='"c1"')
        origin.script("/v.css", CSS, headers={"Cache-Control": "max-age=300", "Content-Type": "text/css",
                                              "Vary": "Accept-Language"})
        self.sock = socket.create_connection(("127.0.0.1", self.node.public_port), timeout=10)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with OriginServer() as origin:
        instance = OriginSite(str(tmp_path_factory.mktemp("prepared-origin")), origin)
        yield instance
        instance.sock.close()
        instance.node.close()


KINDS = [  # (request fields, method)
    ([], "GET"),
    ([("Accept-Encoding", "gzip")], "GET"),
    ([], "HEAD"),
    ([("If-None-Match", '"c1"')], "GET"),
    ([("Range", "bytes=0-99")], "GET"),
    ([("Cache-Control", "max-stale=60")], "GET"),
    ([("Accept-Encoding", "gzip"), ("User-Agent", "Mozilla/5.0 (test)"), ("Accept", "text/css")], "GET"),
]


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: f"{kind[1]} {kind[0]}"[:60])
def test_an_origin_hit_given_again_is_the_pipelines(site, kind):
    fields, method = kind
    for _ in range(3):
        site.ask("/s.css", fields, probe=True)   # filled (or compressed), hit from its file, from memory
    reference = site.ask("/s.css", fields, method, probe=True)
    assert field(reference, "Cache-Status").startswith("contentnode; hit; ttl=")
    before = site.again()
    answers = [site.ask("/s.css", fields, method) for _ in range(6)]
    assert site.again() - before >= 3
    for answer in answers:
        assert timeless(answer) == timeless(reference)
        age, ttl = int(field(answer, "Age")), int(field(answer, "Cache-Status").rpartition("=")[2])
        assert abs(age - int(field(reference, "Age"))) <= 2 and age + ttl in (299, 300)   # max-age=300
    assert len(site.origin.requests_for("/s.css")) == 1


def timeless(answer):
    """shape() with the freshness left in Cache-Status blanked too: it counts down as Age counts up."""
    status, fields, body = shape(answer)
    return status, [(n, v.rpartition("ttl=")[0] if n.lower() == "cache-status" else v) for n, v in fields], body


def test_a_gzip_origin_hit_given_again_decodes(site):
    for _ in range(3):
        site.ask("/s.css", [("Accept-Encoding", "gzip")], probe=True)   # a miss streams what the origin sent
    for _ in range(6):
        status, fields, body = site.ask("/s.css", [("Accept-Encoding", "gzip")])
        assert status == 200 and field((status, fields, body), "Content-Encoding") == "gzip" and gzip.decompress(body) == CSS


def test_an_answer_chosen_by_vary_is_never_given_again(site):
    fields = [("Accept-Language", "de")]
    for _ in range(3):
        site.ask("/v.css", fields, probe=True)
    reference = site.ask("/v.css", fields, probe=True)
    before = site.again()
    answers = [site.ask("/v.css", fields) for _ in range(5)]
    assert site.again() == before
    assert all(timeless(answer) == timeless(reference) for answer in answers)


def test_age_and_freshness_follow_the_node_clock(site):
    for _ in range(4):
        site.ask("/s.css")
    try:
        for shift in (30, 60):
            site.node.set_clock_offset(shift)
            answer = site.ask("/s.css")
            age, ttl = int(field(answer, "Age")), int(field(answer, "Cache-Status").rpartition("hit; ttl=")[2])
            assert age >= shift and age + ttl in (299, 300)
            for _ in range(3):
                site.ask("/s.css")
        asked = len(site.origin.requests_for("/s.css"))
        site.node.set_clock_offset(400)   # past max-age=300: revalidated with the origin
        answer = site.ask("/s.css")
        assert len(site.origin.requests_for("/s.css")) == asked + 1
        assert "hit; ttl=" not in field(answer, "Cache-Status")
    finally:
        site.node.set_clock_offset(0)


def test_an_origin_answer_given_again_never_outlives_its_age(site):
    assert age_lag(site, "/s.css") <= 1
