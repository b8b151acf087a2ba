"""Large cache entries' files stay open between hits: same bytes, same rules, bounded descriptors."""

import os

import contentnode.core.cache_memory as cache_memory
from tests.test_cache_core import Origin
from tests.test_cache_hot import cache, clock, fill  # noqa: F401  (fixtures and the fill helper)

KEY = ("example.com", "/big.bin", "")
BIG = cache_memory.HOT_MAX_OBJECT + 1




def sent(result) -> bytes:
    """What a sendfile of the hit would send (read at the same descriptor and offset)."""
    fd, offset = result.open_file()
    return os.pread(fd, result.size, offset)


def open_entry_files(cache) -> list:
    """This process's descriptors on entry files under the cache root (deleted ones included; the
    books' own file, always open, aside)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(cache.root + "/") and target != cache.root + "/ledger":
            found.append(target)
    return found


def test_hits_of_a_large_entry_share_one_descriptor_that_stays_open(cache):
    body = os.urandom(BIG)
    fill(cache, KEY, body)
    first, second = cache.get(KEY, Origin(b"other"), 60), cache.get(KEY, Origin(b"other"), 60)
    assert first.hit and second.hit and first.body is None
    assert first.open_file()[0] == second.open_file()[0]
    assert sent(first) == sent(second) == body
    assert b"".join(first.chunks(10, 20)) == body[10:20]
    first.close()
    second.close()
    assert len(open_entry_files(cache)) == 1      # kept for the next hit
    third = cache.get(KEY, Origin(b"other"), 60)
    assert sent(third) == body
    third.close()
    assert len(open_entry_files(cache)) == 1


def test_a_purge_closes_the_file_once_the_last_hit_sending_it_is_done(cache):
    body = os.urandom(BIG)
    fill(cache, KEY, body)
    sending = cache.get(KEY, Origin(b"other"), 60)
    assert cache.purge_url(KEY[0], KEY[1]) == 1
    assert sent(sending) == body                  # the hit in flight still sends the whole old body
    files = open_entry_files(cache)
    assert len(files) == 1 and files[0].endswith("(deleted)")
    sending.close()
    assert open_entry_files(cache) == []          # the unlinked file's space is given back
    new = os.urandom(BIG)
    again = cache.get(KEY, Origin(new), 60)
    assert not again.hit and again.read_all() == new


def test_a_replaced_entry_serves_the_new_bytes_and_closes_the_old_file(cache, clock):
    old, new = os.urandom(BIG), os.urandom(BIG)
    fill(cache, KEY, old, ttl=10)
    hit = cache.get(KEY, Origin(b"other"), 10)
    assert sent(hit) == old
    hit.close()
    clock.t += 11                                 # expired: the next request fetches again
    fill(cache, KEY, new, ttl=10)
    assert open_entry_files(cache) == []
    hit = cache.get(KEY, Origin(b"other"), 10)
    assert sent(hit) == new
    hit.close()
    assert len(open_entry_files(cache)) == 1


def test_at_most_open_files_descriptors_are_kept(cache, monkeypatch):
    monkeypatch.setattr(cache_memory, "OPEN_FILES", 2)
    keys = [("example.com", f"/{n}.bin", "") for n in range(3)]
    bodies = [os.urandom(BIG) for _ in keys]
    for key, body in zip(keys, bodies):
        fill(cache, key, body)
    held = cache.get(keys[0], Origin(b"other"), 60)   # still sending while newer ones are hit
    for key, body in zip(keys[1:], bodies[1:]):
        hit = cache.get(key, Origin(b"other"), 60)
        assert sent(hit) == body
        hit.close()
    assert len(open_entry_files(cache)) == 3       # two kept, one retired but still in use
    assert sent(held) == bodies[0]
    held.close()
    assert len(open_entry_files(cache)) == 2
