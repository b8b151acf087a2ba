"""Small cache entries kept in memory after a hit: same bytes, same rules, bounded memory."""

import os

import pytest

import contentnode.core.cache_memory as cache_memory
from contentnode.core.cache import Cache
from tests.test_cache_core import Clock, Origin

KEY = ("example.com", "/a.txt", "")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cache(tmp_path, clock):
    return Cache(str(tmp_path / "cache"), 1 << 24, clock)


def fill(cache, key, body, ttl=60):
    result = cache.get(key, Origin(body), ttl)
    assert not result.hit and result.read_all() == body


def test_a_small_hit_holds_the_entry_bytes_in_memory_and_the_file_stays_readable(cache):
    body = os.urandom(10 * 1024)
    fill(cache, KEY, body)
    first = cache.get(KEY, Origin(b"other"), 60)
    assert first.hit and first.body == body
    assert b"".join(first.chunks(100, 200)) == body[100:200]
    fd, offset = first.open_file()          # sendfile callers still get the entry's file
    assert os.pread(fd, len(body), offset) == body
    first.close()
    second = cache.get(KEY, Origin(b"other"), 60)
    assert second.hit and second.body is first.body   # served from memory, no read


def test_a_large_hit_is_not_kept_in_memory(cache):
    body = os.urandom(cache_memory.HOT_MAX_OBJECT + 1)
    fill(cache, KEY, body)
    hit = cache.get(KEY, Origin(b"other"), 60)
    assert hit.hit and hit.body is None
    fd, offset = hit.open_file()
    assert os.pread(fd, len(body), offset) == body
    hit.close()
    assert cache._hot.bytes == 0


def test_purge_expiry_and_a_new_version_never_serve_the_bytes_held_in_memory(cache, clock):
    fill(cache, KEY, b"v1")
    assert cache.get(KEY, Origin(b"unused"), 60).body == b"v1"
    assert cache.purge_url(*KEY[:2]) == 1
    fill(cache, KEY, b"v2")                          # a miss again: the origin is asked
    assert cache.get(KEY, Origin(b"unused"), 60).body == b"v2"
    clock.t += 61
    again = cache.get(KEY, Origin(b"v3"), 60)        # expired: fetched, not served from memory
    assert not again.hit and again.read_all() == b"v3"


def test_the_memory_held_stays_under_its_cap_oldest_first_out(cache, monkeypatch):
    monkeypatch.setattr(cache_memory, "HOT_MAX_BYTES", 3000)
    keys = [("example.com", f"/{i}.bin", "") for i in range(5)]
    for i, key in enumerate(keys):
        fill(cache, key, bytes([i]) * 1000)
        assert cache.get(key, Origin(b"unused"), 60).body == bytes([i]) * 1000
        assert cache._hot.bytes <= 3000
    held = [k for k in keys if cache._index[k].body is not None]
    assert held == keys[-3:]
    evicted = cache.get(keys[0], Origin(b"unused"), 60)   # read from its file again, then kept
    assert evicted.hit and evicted.body == bytes([0]) * 1000 and cache._hot.bytes <= 3000
