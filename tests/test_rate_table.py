"""The rate limit's token buckets (core/rate_table.py) on their own, with a clock the test moves."""

from contentnode.core import rate_table
from contentnode.core.rate_table import RateTable


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def table(tmp_path, clock, fresh=True, shared=False):
    return RateTable(str(tmp_path / "ratelimit.table"), fresh=fresh, clock=clock, shared=shared)


def test_a_burst_is_served_then_the_wait_is_said_and_tokens_come_back_at_the_rate(tmp_path):
    clock = Clock()
    buckets = table(tmp_path, clock)
    assert [buckets.take("r1", b"\x7f\0\0\1", 2, 3) for _ in range(4)] == [0, 0, 0, 1]
    clock.now += 0.5   # one token back at 2 a second
    assert buckets.take("r1", b"\x7f\0\0\1", 2, 3) == 0
    assert buckets.take("r1", b"\x7f\0\0\1", 2, 3) == 1
    clock.now += 100   # never more than the burst
    assert [buckets.take("r1", b"\x7f\0\0\1", 2, 3) for _ in range(4)] == [0, 0, 0, 1]
    assert buckets.take("r1", b"\x7f\0\0\1", 1, 1) == 1 and buckets.take("r1", b"\x7f\0\0\2", 2, 3) == 0


def test_a_slow_rate_says_the_whole_seconds_to_wait(tmp_path):
    clock = Clock()
    buckets = table(tmp_path, clock)
    assert buckets.take("r1", b"c", 1, 1) == 0
    assert buckets.take("r1", b"c", 1, 1) == 1
    clock.now += 0.25
    assert buckets.take("r1", b"c", 1, 1) == 1   # 0.75 s left: rounded up to whole seconds


def test_rules_and_clients_have_buckets_of_their_own(tmp_path):
    buckets = table(tmp_path, Clock())
    assert buckets.take("r1", b"a", 1, 1) == 0
    assert buckets.take("r2", b"a", 1, 1) == 0
    assert buckets.take("r1", b"b", 1, 1) == 0
    assert buckets.take("r1", b"a", 1, 1) == 1


def test_a_full_set_gives_up_the_client_seen_longest_ago(tmp_path, monkeypatch):
    clock = Clock()
    buckets = table(tmp_path, clock)
    monkeypatch.setattr(buckets, "_slot_of", lambda rule, client: (0, int.from_bytes(client, "little")))
    for n in range(1, rate_table.WAYS + 1):   # fills the one set, each client its bucket spent
        clock.now += 0.01
        assert buckets.take("r", bytes([n]), 1, 1) == 0
    assert buckets.take("r", bytes([2]), 1, 1) == 1   # seen again: kept
    clock.now += 0.01
    assert buckets.take("r", bytes([9]), 1, 1) == 0   # a new client takes the slot of client 1
    assert buckets.take("r", bytes([2]), 1, 1) == 1 and buckets.take("r", bytes([3]), 1, 1) == 1
    assert buckets.take("r", bytes([1]), 1, 1) == 0   # forgotten: a full bucket again (errs towards serving)


def test_processes_mapping_the_same_table_spend_the_same_buckets(tmp_path):
    clock = Clock()
    daemon = table(tmp_path, clock, shared=True)
    worker = table(tmp_path, clock, fresh=False, shared=True)
    assert daemon.take("r1", b"a", 1, 2) == 0
    assert worker.take("r1", b"a", 1, 2) == 0
    assert daemon.take("r1", b"a", 1, 2) == 1 and worker.take("r1", b"a", 1, 2) == 1
    assert (tmp_path / "ratelimit.table").stat().st_size == rate_table.SIZE
    worker.close()
    daemon.close()
