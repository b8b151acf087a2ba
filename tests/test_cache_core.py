"""The disk cache on its own: hits, TTL, LRU, restarts, torn files, single flight."""

import os
import threading

import pytest

import contentnode.core.cache as cache_module
from contentnode.core.cache import Cache
from contentnode.core.cache_entries import key_name
from contentnode.core.cache_fill import FillTruncated, OriginAnswer


class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


class Origin:
    """A fetcher factory that counts calls; body chunks may be held back by a gate."""

    def __init__(self, body=b"hello world", status=200, gate=None, length=None, fail=None):
        self.body, self.status, self.gate, self.length, self.fail = body, status, gate, length, fail
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.calls += 1
        if self.fail:
            raise self.fail
        meta = {"content_type": "text/plain", "etag": '"abc"'}
        length = len(self.body) if self.length is None else self.length
        return OriginAnswer(self.status, meta, length, self._chunks())

    def _chunks(self):
        half = len(self.body) // 2
        yield self.body[:half]
        if self.gate is not None:
            assert self.gate.wait(30), "test gate never opened"
        yield self.body[half:]


KEY = ("example.com", "/a.txt", "")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def cache(tmp_path, clock):
    return Cache(str(tmp_path / "cache"), 1 << 20, clock)


def read_hit(result):
    fd, offset = result.open_file()
    try:
        return os.pread(fd, result.size, offset)
    finally:
        result.close()


def test_miss_then_hit_served_from_file(cache):
    origin = Origin(b"x" * 1000)
    first = cache.get(KEY, origin, 60)
    assert not first.hit and first.status == 200 and first.size == 1000
    assert first.read_all() == b"x" * 1000
    second = cache.get(KEY, origin, 60)
    assert second.hit and second.meta["etag"] == '"abc"'
    assert read_hit(second) == b"x" * 1000
    assert origin.calls == 1
    assert cache.stats()["entries"] == 1


def test_range_of_hit_and_of_fill(cache):
    body = bytes(range(256)) * 10
    result = cache.get(KEY, Origin(body), 60)
    assert b"".join(result.chunks(100, 200)) == body[100:200]
    result.wait_stored()
    result.close()
    hit = cache.get(KEY, Origin(body), 60)
    assert hit.hit and b"".join(hit.chunks(2000, 2560)) == body[2000:]
    hit.close()


def test_expired_entry_is_fetched_again(cache, clock):
    origin = Origin(b"v1")
    cache.get(KEY, origin, 60).read_all()
    clock.t += 59
    assert cache.get(KEY, origin, 60).hit
    clock.t += 2
    origin.body = b"v2"
    result = cache.get(KEY, origin, 60)
    assert not result.hit and result.read_all() == b"v2"
    assert origin.calls == 2
    assert cache.state(KEY)["cached"] is True


def test_lru_eviction_keeps_recently_used(tmp_path, clock):
    cache = Cache(str(tmp_path / "c"), 3 * 1200, clock)
    keys = [("h", f"/{n}", "") for n in range(3)]
    for key in keys:
        cache.get(key, Origin(b"z" * 1000), 60).read_all()
    assert cache.stats()["entries"] == 3
    cache.lookup(keys[0]).close()                       # /0 is now the most recent
    cache.get(("h", "/new", ""), Origin(b"z" * 1000), 60).read_all()
    assert cache.lookup(keys[1]) is None                # least recently used went
    for key in (keys[0], keys[2], ("h", "/new", "")):
        hit = cache.lookup(key)
        assert hit is not None
        hit.close()
    assert cache.stats()["bytes"] <= 3 * 1200


def test_object_over_the_cap_is_served_but_not_kept(tmp_path, clock):
    cache = Cache(str(tmp_path / "c"), 500, clock)
    result = cache.get(KEY, Origin(b"b" * 2000), 60)
    assert result.read_all() == b"b" * 2000
    assert cache.lookup(KEY) is None
    assert os.listdir(tmp_path / "c" / "tmp") == []


def test_zero_ttl_is_not_cached(cache):
    origin = Origin(b"now")
    assert cache.get(KEY, origin, 0).read_all() == b"now"
    assert cache.get(KEY, origin, 0).read_all() == b"now"
    assert origin.calls == 2


def test_survives_restart_and_drops_torn_files(tmp_path, clock):
    root = str(tmp_path / "c")
    cache = Cache(root, 1 << 20, clock)
    cache.get(KEY, Origin(b"kept"), 600).read_all()
    other = ("example.com", "/torn", "")
    cache.get(other, Origin(b"0123456789"), 600).read_all()
    torn = next(e.path for e in cache._index.values() if e.key == other)
    os.truncate(torn, os.path.getsize(torn) - 3)
    open(os.path.join(root, "tmp", "leftover"), "wb").close()

    again = Cache(root, 1 << 20, clock)
    hit = again.lookup(KEY)
    assert hit is not None and read_hit(hit) == b"kept"
    assert hit.meta["content_type"] == "text/plain"
    assert again.lookup(other) is None and not os.path.exists(torn)
    assert os.listdir(os.path.join(root, "tmp")) == []
    assert again.stats()["entries"] == 1


def test_restart_keeps_lru_order(tmp_path, clock):
    root = str(tmp_path / "c")
    cache = Cache(root, 1 << 20, clock)
    keys = [("h", f"/{n}", "") for n in range(3)]
    for n, key in enumerate(keys):
        cache.get(key, Origin(b"q" * 1000), 600).read_all()
        os.utime(cache._index[key].path, (1000 + n, 1000 + n))
    clock.t += 120
    cache.lookup(keys[0]).close()                       # refreshes the mtime of /0
    small = Cache(root, 2 * 1200, clock)                # restart with a smaller cap
    assert small.lookup(keys[1]) is None
    assert small.lookup(keys[0]) is not None and small.lookup(keys[2]) is not None


def test_origin_status_is_passed_on_and_not_cached(cache):
    origin = Origin(b"", status=404)
    result = cache.get(KEY, origin, 60)
    assert result.status == 404 and not result.hit
    assert cache.get(KEY, origin, 60).status == 404
    assert origin.calls == 2 and cache.stats()["entries"] == 0


def test_fetch_error_reaches_caller_and_leaves_nothing(cache, tmp_path):
    origin = Origin(fail=TimeoutError("origin timed out"))
    with pytest.raises(TimeoutError):
        cache.get(KEY, origin, 60)
    assert cache.stats() == {"entries": 0, "bytes": 0, "max_bytes": 1 << 20, "filling": 0}
    assert os.listdir(tmp_path / "cache" / "tmp") == []


def test_short_origin_body_fails_the_reader_and_is_not_cached(cache):
    result = cache.get(KEY, Origin(b"12345", length=10), 60)
    with pytest.raises(FillTruncated):
        result.read_all()
    assert cache.lookup(KEY) is None


def test_first_response_streams_while_filling(cache):
    gate = threading.Event()
    origin = Origin(b"A" * 100 + b"B" * 100, gate=gate)
    result = cache.get(KEY, origin, 60)
    chunks = result.chunks()
    assert next(chunks) == b"A" * 100          # arrives while the origin is still held back
    assert cache.stats()["filling"] == 1 and cache.lookup(KEY) is None
    gate.set()
    assert b"".join(chunks) == b"B" * 100
    result.wait_stored()
    result.close()
    hit = cache.lookup(KEY)
    assert hit is not None and read_hit(hit) == b"A" * 100 + b"B" * 100


def test_a_client_that_got_the_whole_body_finds_the_entry(cache):
    """The last bytes of a fill reach its readers only once the entry is stored: a client
    that got the whole body and asks again gets a hit, never a second origin fetch."""
    commit = threading.Event()

    class HeldBeforeCommit(Origin):
        def _chunks(self):
            yield self.body
            assert commit.wait(30), "test gate never opened"  # the body is on disk; the commit waits

    origin = HeldBeforeCommit(b"version 1")
    first = cache.get(KEY, origin, 60)
    got = []
    reader = threading.Thread(target=lambda: got.extend(first.chunks()))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive() and got == []  # every byte is on disk, but not yet an entry
    commit.set()
    reader.join(10)
    assert b"".join(got) == b"version 1"
    first.close()
    origin.body = b"version 2"
    again = cache.get(KEY, origin, 60)
    assert again.hit and read_hit(again) == b"version 1" and origin.calls == 1


def test_fifty_concurrent_misses_make_one_fetch(cache):
    gate = threading.Event()
    body = os.urandom(300_000)
    origin = Origin(body, gate=gate)
    results, bodies, errors = [], [], []
    lock = threading.Lock()
    joined = threading.Barrier(51)

    def client():
        try:
            result = cache.get(KEY, origin, 60)
            with lock:
                results.append(result)
            joined.wait(30)
            data = result.read_all()
            with lock:
                bodies.append(data)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(50)]
    for t in threads:
        t.start()
    joined.wait(30)                 # every client holds its result before the body may finish
    gate.set()
    for t in threads:
        t.join(30)
    assert errors == []
    assert origin.calls == 1
    assert len(bodies) == 50 and all(b == body for b in bodies)
    assert not any(r.hit for r in results)     # all of them shared the one fill


def test_purge_during_fill_discards_it(cache):
    gate = threading.Event()
    result = cache.get(KEY, Origin(b"old-body", gate=gate), 60)
    assert cache.purge_url(*KEY[:2]) == 0
    gate.set()
    assert result.read_all() == b"old-body"
    assert cache.lookup(KEY) is None


def test_a_fill_purged_while_it_waits_for_its_key_never_fetches(cache):
    """A purge while a fill's thread still waits for its key's lock: the fill stops before
    fetching, and its reader looks again (one origin GET, kept), not the discarded fill's
    fetch and then the reader's own."""
    origin = Origin(b"new-body")
    hold = cache.ledger.key_lock(key_name(KEY), 5)   # another fill of the key, as far as this one knows
    assert hold.held
    got = []
    reader = threading.Thread(target=lambda: got.append(cache.get(KEY, origin, 60).read_all()))
    reader.start()
    for _ in range(500):  # bounded: the fill is registered at once, its thread then waits for `hold`
        with cache._lock:
            if KEY in cache._fills:
                break
        threading.Event().wait(0.01)
    assert cache.purge_url(*KEY[:2]) == 0
    hold.release()
    reader.join(30)
    assert got == [b"new-body"]
    assert origin.calls == 1
    assert cache.lookup(KEY) is not None   # the fill after the purge was kept


def test_purge_variants_prefix_and_all(cache):
    keys = [("a.com", "/img/x.png", ""), ("a.com", "/img/x.png", "w=10"),
            ("a.com", "/img/y.png", ""), ("a.com", "/doc/z", ""), ("b.com", "/img/x.png", "")]
    for key in keys:
        cache.get(key, Origin(b"data"), 60).read_all()
    assert cache.purge_url("a.com", "/img/x.png") == 2
    assert cache.lookup(keys[2]) is not None
    assert cache.purge_prefix("a.com", "/img/") == 1
    assert cache.purge_prefix("a.com", "/img/") == 0
    assert cache.purge_all() == 2
    assert cache.stats()["entries"] == 0 and cache.stats()["bytes"] == 0


def test_state_reports_age_and_size(cache, clock):
    assert cache.state(KEY)["cached"] is False
    cache.get(KEY, Origin(b"12345"), 100).read_all()
    clock.t += 30
    assert cache.state(KEY) == {"cached": True, "age": 30, "size": 5, "expires_in": 70}


class SlowOrigin:
    """An origin sending `size` bytes in 64 KiB chunks, each after `delay` seconds; counts what it sent."""

    def __init__(self, size, delay=0.01):
        self.size, self.delay, self.sent, self.calls = size, delay, 0, 0

    def __call__(self):
        self.calls += 1
        return OriginAnswer(200, {"content_type": "application/octet-stream"}, self.size, self._chunks())

    def _chunks(self):
        import time
        while self.sent < self.size:
            time.sleep(self.delay)
            chunk = b"x" * min(65536, self.size - self.sent)
            self.sent += len(chunk)
            yield chunk


def _disk_bytes(root):
    """Bytes of the entry and temp files (not the books' own small file)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files
               if f != "ledger")


def test_an_object_larger_than_the_cap_never_touches_the_disk(tmp_path, clock):
    cache = Cache(str(tmp_path / "c"), 1 << 20, clock)
    origin = SlowOrigin(4 << 20, delay=0)
    result = cache.get(KEY, origin, 60)
    first = next(result.chunks())
    assert first and _disk_bytes(tmp_path / "c") == 0  # streamed through, not written
    result.close()
    assert cache.stats()["filling"] == 0 and cache.filling_bytes == 0


def test_fills_in_flight_count_against_the_cap(tmp_path, clock):
    """Two 600 KB fills cannot both be on disk under a 1 MiB cap: the second is streamed instead."""
    cache = Cache(str(tmp_path / "c"), 1 << 20, clock)
    gate = threading.Event()
    first = cache.get(("h", "/1", ""), Origin(b"a" * 600_000, gate=gate), 60)
    chunks = first.chunks()
    head = next(chunks)
    second = cache.get(("h", "/2", ""), Origin(b"b" * 600_000), 60)
    assert type(second).__name__ == "StreamedResult"
    assert second.read_all() == b"b" * 600_000
    assert _disk_bytes(tmp_path / "c") <= 1 << 20
    gate.set()
    assert head + b"".join(chunks) == b"a" * 600_000
    first.wait_stored()
    first.close()
    assert cache.lookup(("h", "/1", "")) is not None and cache.filling_bytes == 0


def test_a_fill_nobody_waits_for_stops(tmp_path, clock):
    """The visitor hangs up: the origin download stops and the temp file goes."""
    cache = Cache(str(tmp_path / "c"), 64 << 20, clock)
    origin = SlowOrigin(20 << 20, delay=0.01)
    result = cache.get(KEY, origin, 60)
    next(result.chunks())
    result.close()
    import time
    time.sleep(0.5)
    sent = origin.sent
    time.sleep(0.5)
    assert origin.sent == sent < 2 << 20  # stopped, far short of 20 MiB
    assert cache.stats()["filling"] == 0 and cache.filling_bytes == 0
    assert os.listdir(tmp_path / "c" / "tmp") == []


def test_single_flight_holds_for_the_readers_that_stay(tmp_path, clock):
    cache = Cache(str(tmp_path / "c"), 64 << 20, clock)
    origin = SlowOrigin(2 << 20, delay=0.001)
    leaving = cache.get(KEY, origin, 60)
    staying = cache.get(KEY, origin, 60)
    leaving.close()
    assert len(staying.read_all()) == 2 << 20
    assert origin.calls == 1 and cache.lookup(KEY) is not None


def test_a_key_with_an_encoding_suffix_survives_a_restart_and_goes_with_its_object(tmp_path, clock):
    """Room for compressed variants: a key may carry more parts after the image variant (an
    encoding); it is an entry like any other, and a URL purge takes it with the object."""
    root = str(tmp_path / "c")
    plain, encoded = ("h", "/a.css", ""), ("h", "/a.css", "", "br")
    cache = Cache(root, 1 << 20, clock)
    cache.get(plain, Origin(b"body{}"), 600).read_all()
    cache.get(encoded, Origin(b"compressed"), 600).read_all()
    again = Cache(root, 1 << 20, clock)
    assert read_hit(again.lookup(encoded)) == b"compressed"
    assert again.purge_url("h", "/a.css") == 2
    assert again.lookup(plain) is None and again.lookup(encoded) is None


def test_an_index_of_entries_other_processes_evicted_stays_bounded(tmp_path, clock, monkeypatch):
    """A process indexes what it meets on disk; another one evicts those files behind its back.
    What this process holds for them stays within twice the folder's entries plus INDEX_SLACK."""
    monkeypatch.setattr(cache_module, "INDEX_SLACK", 32)
    root = str(tmp_path / "c")
    reader = Cache(root, 5000, clock, processes=2)
    filler = Cache(root, 5000, clock, processes=2, worker_slot=1)
    for n in range(200):
        key = ("h", f"/{n}", "")
        filler.get(key, Origin(b"v" * 100), 600).read_all()
        hit = reader.lookup(key)
        assert hit is not None
        hit.close()
    entries = reader.stats()["entries"]
    assert 0 < entries < 50
    assert len(reader._index) <= 2 * entries + 32 + 1
    assert len(reader._order) <= 2 * entries + 32 + 1


def test_temp_files_of_dead_processes_go_at_start_even_under_this_pid(tmp_path, clock):
    """Temp files are named by their process's pid; a dead worker's pid may be this daemon's now."""
    root = tmp_path / "c"
    (root / "tmp").mkdir(parents=True)
    for name in (f"{os.getpid()}-{'ab' * 32}.0001", "4194300-x.1", "leftover"):
        (root / "tmp" / name).write_bytes(b"t" * 500)
    cache = Cache(str(root), 1 << 20, clock)
    assert os.listdir(root / "tmp") == [] and cache.total == 0


def test_an_answer_may_end_its_entry_before_the_ttl(cache, clock):
    """A compressed variant expires with the object it was made from, not a ttl after it."""
    origin = Origin()
    derived = lambda: OriginAnswer(200, {}, 3, [b"abc"], expires_at=clock.t + 10)  # noqa: E731
    cache.get(KEY + ("gzip",), derived, 60).read_all()
    cache.get(KEY, origin, 60).read_all()
    clock.t += 9
    again = Cache(cache.root, 1 << 20, clock)   # the header on disk says so too
    for reader in (cache, again):
        hit = reader.lookup(KEY + ("gzip",))
        assert hit is not None and hit.read_all() == b"abc"
    clock.t += 2
    assert cache.lookup(KEY + ("gzip",)) is None and again.lookup(KEY + ("gzip",)) is None
    hit = cache.lookup(KEY)   # its own ttl
    assert hit is not None and hit.read_all() == b"hello world"
    again.close()


def _write_legacy_entry(root: str, key: tuple, body: bytes, stored_at: float, ttl: int, torn: bool = False) -> str:
    """An entry file as contentnode 0.1 wrote it: named by the SHA-256 of the whole key, no id."""
    import hashlib

    from contentnode.core.cache_entries import header_bytes
    name = hashlib.sha256("\0".join(key).encode()).hexdigest()
    folder = os.path.join(root, name[:2])
    os.makedirs(folder, exist_ok=True)
    header = header_bytes({"key": list(key), "size": len(body), "meta": {"content_type": "text/plain"},
                           "stored_at": stored_at, "expires_at": stored_at + ttl})
    path = os.path.join(folder, name)
    with open(path, "wb") as f:
        f.write(header + (body[:-2] if torn else body))
    return path


def test_an_upgrade_keeps_the_entries_the_previous_version_wrote(tmp_path, clock):
    """Entries of 0.1 (no id, another file name) are adopted at start, not dropped: an upgrade
    keeps the cache. A torn one still goes."""
    root = str(tmp_path / "c")
    os.makedirs(os.path.join(root, "tmp"))
    kept = _write_legacy_entry(root, KEY, b"from 0.1", clock.t, 600)
    torn_key = ("example.com", "/torn.txt", "")
    torn = _write_legacy_entry(root, torn_key, b"0123456789", clock.t, 600, torn=True)
    cache = Cache(root, 1 << 20, clock)
    origin = Origin(b"fetched again")
    result = cache.get(KEY, origin, 600)
    assert result.hit and result.read_all() == b"from 0.1" and origin.calls == 0
    assert not os.path.exists(kept) and not os.path.exists(torn)
    assert cache.lookup(torn_key) is None and cache.stats()["entries"] == 1
    assert Cache(root, 1 << 20, clock).lookup(KEY) is not None   # and under its new name for good


def test_an_entry_that_vanishes_at_every_look_is_answered_from_the_origin(cache, monkeypatch):
    """Each fill this request joins is dropped before it serves (a purge landing on every fill in
    turn): after its looks the request streams from the origin instead of failing (a 502 before)."""
    join = cache._join

    def dropped(fill, fd, fetch, owner):
        result = join(fill, fd, fetch, owner)
        if result is not None:
            result.close()
        return None

    monkeypatch.setattr(cache, "_join", dropped)
    monkeypatch.setattr(cache, "_fresh", lambda key: None)   # and the stored entry is gone again
    origin = Origin(b"straight from the origin")
    assert cache.get(KEY, origin, 60).read_all() == b"straight from the origin"
