"""The primary's debounce (docs/API.md, "Fleet": 0.3 s without a further change, at most 2 s
after the first): a burst of edits is one bundle, and a stream of edits that never pauses is
still published within the maximum. Real daemons and bucket."""

import threading
import time

import pytest

from contentnode.fleet.service import MAX_SETTLE_SECONDS
from tests.fleet_setup import Fleet, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

BURST = 6


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=0, host="debounce.example.test")
    before = instance.seq()
    instance.site.add_rule("/", prefix="site/")
    wait_for(lambda: instance.seq() > before, what="the first bundle")
    time.sleep(1)   # settled
    yield instance
    instance.close()


def _published(fleet) -> int:
    return fleet.primary.log().count("fleet: published bundle")


def test_a_burst_of_rule_writes_is_one_bundle(fleet):
    seq, published = fleet.seq(), _published(fleet)
    start = threading.Barrier(BURST)
    statuses = []

    def write(index):
        start.wait(10)
        statuses.append(fleet.admin.post("/api/rules", {"domain": fleet.site.host, "path": f"/burst{index}",
                                                        "bucket": fleet.site.bucket_id}).status)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert statuses == [201] * BURST
    wait_for(lambda: fleet.seq() > seq, 10, what="the burst published")
    time.sleep(MAX_SETTLE_SECONDS + 1)   # anything published apart from the first bundle shows by now
    assert fleet.seq() == seq + 1
    assert _published(fleet) == published + 1
    rules = fleet.state(fleet.primary)["rules"].values()
    assert {f"/burst{i}" for i in range(BURST)} <= {rule["path"] for rule in rules}


def test_a_stream_of_writes_that_never_pauses_is_published_within_the_maximum(fleet):
    seq = fleet.seq()
    stop = threading.Event()
    first_write = time.monotonic()
    risen_at = []

    def watch():
        while not stop.is_set():
            if fleet.seq() > seq:
                risen_at.append(time.monotonic())
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        index = 0
        while not risen_at and time.monotonic() - first_write < 3 * MAX_SETTLE_SECONDS:
            fleet.site.add_rule(f"/stream{index}")   # a write every 0.1 s: never 0.3 s of quiet
            index += 1
            time.sleep(0.1)
    finally:
        stop.set()
        watcher.join(10)
    assert risen_at, f"nothing published during {3 * MAX_SETTLE_SECONDS} s of writes"
    # the maximum, plus the time a poll and one publish take on a busy machine
    assert risen_at[0] - first_write < MAX_SETTLE_SECONDS + 2, risen_at[0] - first_write
    assert index >= 2
