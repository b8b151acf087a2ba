"""The top summaries in-process: the column-wise fold counts exactly what one shaped row at a time
counts, a bounded Summary keeps its frequent keys and its bound, and its dump loads back."""

import random
from collections import Counter

import pytest

from contentnode.core.traffic_summary import Summary
from contentnode.core.traffic_shape import shaped
from contentnode.core.traffic_top import DIMENSIONS, TrafficTop

T0 = 1_700_000_000 - 1_700_000_000 % 3600


PLAIN = {"client": ["10.0.0.1", "10.0.0.2", "10.0.1.9"],
         "referer": [None, "https://Ref.example:8443/p?q", "not a url", "http://u:p@Host.EXAMPLE/x", "HTTP://a.example?b=c"]}
ODD = {"client": PLAIN["client"] + ["2001:db8::1", None, "", "not an address", "10.0.0.0/24"],
       "referer": PLAIN["referer"] + ["https://[2001:DB8::1]:8443/p", "https://", "ftp://" + "h" * 300 + "/x"]}


def raw_rows(count: int, seed: int, pools: dict = ODD) -> list:
    """Raw rows as the request path appends them, over two domains and a few minutes (PLAIN: values the
    fold shapes by string methods over a whole column; ODD: some it shapes one call each)."""
    pick = random.Random(seed).choice
    return [(T0 + 60 * pick(range(5)) + pick(range(60)), pick(["a.example", "b.example"]), "GET",
             pick(["/a", "/b", "/c", "/" + "x" * 300]), pick([200, 404]), pick([10, 200]),
             pick(["hit", "miss", None]), pick(pools["client"]), pick(pools["referer"]), pick([None, "DE"]))
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


@pytest.mark.parametrize("pools", [PLAIN, ODD], ids=["plain", "odd"])
@pytest.mark.parametrize("mode", ["full", "truncated", "off"])
def test_the_fold_counts_what_shaped_rows_count(tmp_path, mode, pools):
    rows = raw_rows(3000, seed=len(mode), pools=pools)
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


def test_one_group_of_distinct_values_counts_what_shaped_rows_count(tmp_path):
    """A fold of one domain's minute (no grouping), every path distinct, a few repeated sizes."""
    rows = [(T0 + 7, "a.example", "GET", f"/p/{number % 250}", 200 + number % 3, number % 5, "hit",
             f"10.0.{number % 4}.{number}", f"https://r{number % 9}.example/x", None) for number in range(300)]
    daemon = TrafficTop(str(tmp_path / "top.json"), lambda: T0 + 59.0, lambda: "truncated")
    for row in rows:
        daemon.record(row)
    for dimension in ("client", "referer", "status"):
        answer = daemon.top("a.example", "1h", dimension, "truncated")
        assert {row["value"]: (row["requests"], row["bytes"]) for row in answer["top"]} == \
            expected(rows, "truncated", "a.example", dimension), dimension
