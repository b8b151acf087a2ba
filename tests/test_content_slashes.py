"""One canonical path per public request, before rule matching and cache keys: repeated slashes
spell the same object, so they share one cache entry and one purge (a takedown takes), and
cannot mint entries and origin fetches of one object."""

import pytest

from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("slashes")), seaweed)
    instance.add_rule("/", prefix="root/", cache_ttl=600)
    instance.add_rule("/r", prefix="r/", cache_ttl=600)
    yield instance
    instance.close()


SPELLINGS = ["/f.txt", "//f.txt", "///f.txt", "/f.txt", "//f.txt"]


def test_every_spelling_is_one_entry_and_one_origin_fetch(site):
    site.put("root/f.txt", b"version one")
    answers = [site.raw_get(path) for path in SPELLINGS]
    assert answers == [(200, b"version one")] * len(SPELLINGS)
    assert site.origin_gets("root/f.txt") == 1
    for n in range(2, 30):   # a visitor varying the slashes mints nothing
        assert site.raw_get("/" * n + "f.txt") == (200, b"version one")
    assert site.origin_gets("root/f.txt") == 1


@pytest.mark.parametrize("purge", [
    {"urls": ["http://cdn.example.test/f.txt"]},
    {"urls": ["http://cdn.example.test//f.txt"]},
    {"domain": "cdn.example.test", "prefix": "/f"},
    {"domain": "cdn.example.test", "prefix": "///f"},
])
def test_a_purge_covers_every_spelling(site, purge):
    site.put("root/f.txt", b"before the purge")
    assert site.admin.post("/api/purge", {"all": True}).status == 200
    for path in SPELLINGS:
        assert site.raw_get(path) == (200, b"before the purge")
    site.put("root/f.txt", b"after the purge")
    response = site.admin.post("/api/purge", purge)
    assert response.status == 200 and response.json["purged"] == 1, response.body
    for path in SPELLINGS:
        assert site.raw_get(path) == (200, b"after the purge"), f"{path} still served the purged body"


def test_repeated_slashes_match_the_longer_rule(site):
    site.put("r/big.bin", b"under rule /r")
    site.put("root/r/big.bin", b"under rule /")
    assert site.raw_get("//r/big.bin") == (200, b"under rule /r")
    assert site.raw_get("/r//big.bin") == (200, b"under rule /r")
