"""The top summaries in-process: the column-wise fold counts exactly what one shaped row at a time
counts, a bounded Summary keeps its frequent keys and its bound, and its dump loads back."""

import random
from collections import Counter

import pytest

from contentnode.core.traffic_summary import Summary
from contentnode.core.traffic_top import DIMENSIONS, TrafficTop, shaped

T0 = 1_700_000_000 - 1_700_000_000 % 3600


def raw_rows(count: int, seed: int) -> list:
    """Raw rows as the request path appends them, over two domains and a few minutes."""
    pick = random.Random(seed).choice
    return [(T0 + 60 * pick(range(5)) + pick(range(60)), pick(["a.example", "b.example"]), "GET",
             pick(["/a", "/b", "/c", "/" + "x" * 300]), pick([200, 404]), pick([10, 200]),
             pick(["hit", "miss", None]), pick(["10.0.0.1", "10.0.0.2", "2001:db8::1", None]),
             pick([None, "https://Ref.example:8443/p?q", "not a url"]), pick([None, "DE"]))
            for _ in range(count)]


def expected(rows: list, mode: str, domain: str, dimension: str) -> dict:
    """What a top answer must hold, counted one shaped row at a time."""
    index = DIMENSIONS.index(dimension)
    requests: Counter = Counter()
    nbytes: Counter = Counter()
    for row in rows:
        _, row_domain, _, path, status, size, cache, client, referer, country = shaped(row, mode)
        key = (path, client, referer, str(status), cache, country)[index]
        if row_domain == domain and key is not None:
            requests[key] += 1
            nbytes[key] += size
    return {key: (requests[key], nbytes[key]) for key in requests}


@pytest.mark.parametrize("mode", ["full", "truncated", "off"])
def test_the_fold_counts_what_shaped_rows_count(tmp_path, mode):
    rows = raw_rows(3000, seed=len(mode))
    daemon = TrafficTop(str(tmp_path / "top.json"), lambda: T0 + 3599.0, lambda: mode)
    worker = TrafficTop(None, lambda: T0 + 3599.0, lambda: mode)
    for number, row in enumerate(rows):
        (worker if number % 3 else daemon).record(row)   # its own rows, and a worker's reports
        if number % 700 == 0:
            daemon.merge_pending(worker.take_pending())
    daemon.merge_pending(worker.take_pending())
    for domain in ("a.example", "b.example"):
        for dimension in DIMENSIONS:
            answer = daemon.top(domain, "1h", dimension, mode)
            assert answer["approximate"] is False
            assert {row["value"]: (row["requests"], row["bytes"]) for row in answer["top"]} == \
                expected(rows, mode, domain, dimension), (domain, dimension)
            assert daemon.top(domain, "24h", dimension, mode)["top"] == answer["top"]


def test_a_bounded_summary_keeps_its_frequent_keys_and_its_bound():
    summary = Summary(8)
    seen: Counter = Counter()
    pick = random.Random(1)
    for batch in range(50):
        keys = ["/hot"] * 20 + [f"/cold/{pick.randrange(10_000)}" for _ in range(100)]
        seen.update(keys)
        summary.merge(Summary.counted(keys, [1] * len(keys), lambda values: values))
        assert len(summary.estimates) <= 16
    assert summary.approximate and summary.top(1) == [("/hot", 1000, 1000)]
    for key, count in seen.items():
        if key in summary.estimates:
            assert summary.estimates[key] >= count       # an estimate never undercounts
        else:
            assert count <= summary.floor                # nothing dropped was seen more than the floor
    again = Summary.load(8, summary.dump())
    assert again.dump() == summary.dump() and again.top(16) == summary.top(16)


def test_a_bad_dump_is_refused():
    for dump in ([0, [[1, 1, 1, 1]]], [0, [["/a", 1, 1]]], [0, [["/a", 1, 1, 1], ["/b", 1, 1]]], [0, [["/a", "x", 1, 1]]]):
        with pytest.raises((ValueError, TypeError)):
            Summary.load(8, dump)
