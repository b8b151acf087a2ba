"""The cache's calls for the shared cache: answers a fill's owner keeps to itself, entries
that may not answer until revalidated, and an answer too large handed over, not asked twice."""

import threading

import pytest

from contentnode.core.cache import Cache
from contentnode.core.cache_fill import OriginAnswer

KEY = ("example.com", "/a", "")


class Origin:
    """Counts calls; each answer says which call it was; the first one waits for `gate`."""

    def __init__(self, shared=True, size=10, gate=None):
        self.shared, self.size, self.gate = shared, size, gate
        self.calls = 0
        self.lock = threading.Lock()
        self.started = threading.Event()

    def __call__(self):
        with self.lock:
            self.calls += 1
            n = self.calls
        self.started.set()
        body = (b"%d" % n) * self.size
        return OriginAnswer(200, {"call": n}, len(body), self._chunks(body, n), shared=self.shared)

    def _chunks(self, body, n):
        if n == 1 and self.gate is not None:
            assert self.gate.wait(30)
        yield body


@pytest.fixture
def cache(tmp_path):
    return Cache(str(tmp_path / "cache"), 1 << 20)


def _read_later(cache, key, fetch, out):
    def run():
        result = cache.get(key, fetch, 60)
        out.append((result.meta["call"], result.read_all()))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_an_answer_that_may_not_be_shared_goes_to_its_owner_alone(cache):
    gate = threading.Event()
    origin = Origin(shared=False, gate=gate)
    owner = cache.get(KEY, origin, 60)
    assert origin.started.wait(10)
    seen: list = []
    waiter = _read_later(cache, KEY, origin, seen)   # joins the fill while the owner's answer is held
    gate.set()
    assert owner.meta["call"] == 1 and owner.read_all() == b"1" * 10
    waiter.join(10)
    assert seen == [(2, b"2" * 10)]                  # the waiter asked the origin on its own
    assert cache.peek(KEY) is None and cache.stats()["entries"] == 0


def test_an_unusable_entry_is_replaced_by_one_fill_and_kept_until_then(cache):
    origin = Origin()
    cache.get(KEY, origin, 60).read_all()
    old = cache.peek(KEY)
    assert old.meta == {"call": 1}
    gate = threading.Event()
    origin.calls, origin.gate = 0, gate
    refresh = cache.get(KEY, origin, 60, usable=lambda entry: entry.meta["call"] != 1)
    assert origin.started.wait(10)
    assert cache.peek(KEY).meta == {"call": 1}        # still there while the new answer fills
    seen: list = []
    waiter = threading.Thread(target=lambda: seen.append(
        cache.get(KEY, origin, 60, usable=lambda e: e.meta["call"] != 1).read_all()))
    waiter.start()
    gate.set()
    assert refresh.read_all() == b"1" * 10 and origin.calls == 1
    waiter.join(10)
    assert seen == [b"1" * 10] and origin.calls == 1   # the waiter shared the one fill
    assert cache.peek(KEY) is not old and cache.lookup(KEY).hit


def test_an_answer_larger_than_the_cap_is_asked_for_once(tmp_path):
    cache = Cache(str(tmp_path / "cache"), 1 << 20)
    origin = Origin(size=2 << 20)
    result = cache.get(KEY, origin, 60)
    assert type(result).__name__ == "StreamedResult" and len(result.read_all()) == 2 << 20
    assert origin.calls == 1 and cache.stats()["entries"] == 0
