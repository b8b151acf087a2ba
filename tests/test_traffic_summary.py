"""The top summaries in-process: the column-wise fold counts exactly what one shaped row at a time
counts, a bounded Summary keeps its frequent keys and its bound, and its dump loads back."""

import json
import random
from collections import Counter

import pytest

from contentnode.core.traffic_summary import Summary
from contentnode.core.traffic_shape import shaped
from contentnode.core.traffic_top import ANSWERED, DIMENSIONS, KEEP, TrafficTop, _counted

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


def answer_of(top: TrafficTop, range_name: str, dimension: str = "path", domain: str = "a.example") -> dict:
    answer = top.top(domain, range_name, dimension, "truncated")
    return {"approximate": answer["approximate"],
            "top": {row["value"]: (row["requests"], row["bytes"]) for row in answer["top"]}}


def hour_of_rows(seed: int) -> list:
    """An hour of one domain's rows, a fold's worth a minute: 3 hot paths and 8 seen once in every
    minute, and in 40 minutes 150 paths seen once each (far more than KEEP: minutes and the hour
    evict, the 8 among them)."""
    pick = random.Random(seed)
    rows = []
    for minute in range(60):
        paths = ["/hot/1"] * 30 + ["/hot/2"] * 20 + ["/hot/3"] * 10 + [f"/warm/{n}" for n in range(8)]
        paths += [f"/cold/{minute}/{n}" for n in range(150 if minute % 3 else 0)]
        pick.shuffle(paths)
        rows.append([(T0 + 60 * minute + n % 60, "a.example", "GET", path, 200, 1 + len(path), "hit",
                      f"10.0.{minute % 8}.{n % 7}", None, None) for n, path in enumerate(paths)])
    return rows


def test_an_hour_built_from_its_minutes_is_the_hour_counted_directly(tmp_path):
    """The hour is kept as minutes only and built from them when asked for: the same answer as the hour
    counted fold by fold (as it was kept before), exact for the hot keys even when minutes and the
    hour evict, and the same after a save and a start, and once the hour is sealed."""
    now = [T0 + 3599.0]
    daemon = TrafficTop(str(tmp_path / "top.json"), lambda: now[0], lambda: "truncated")
    direct = [Summary(KEEP) for _ in DIMENSIONS]   # the hour counted directly: every fold merged into it
    minutes = hour_of_rows(seed=3)
    for rows in minutes:
        for row in rows:
            daemon.record(row)
        daemon.take_pending()
        for summary, other in zip(direct, _counted(rows, "truncated")["a.example", rows[0][0] // 60 * 60]):
            summary.merge(other)
    flat = [row for rows in minutes for row in rows]
    built = answer_of(daemon, "24h")
    assert built["approximate"] is True and direct[0].approximate
    hot = {key: value for key, value in expected(flat, "truncated", "a.example", "path").items() if "/hot/" in key}
    assert {key: built["top"][key] for key in hot} == hot == {key: (r, b) for key, r, b in direct[0].top(3)}
    assert list(built["top"])[:3] == ["/hot/1", "/hot/2", "/hot/3"]
    hour = daemon._hour(("a.example", T0), 0)   # built from minutes that each dropped keys
    assert hour is not None and hour.floor > 0
    for key, (count, _) in expected(flat, "truncated", "a.example", "path").items():
        assert hour.estimates[key] >= count if key in hour.estimates else count <= hour.floor, key
    for dimension in ("client", "referer", "status", "cache", "country"):   # no eviction: exact both ways
        whole = expected(flat, "truncated", "a.example", dimension)
        assert answer_of(daemon, "24h", dimension)["top"] == whole
        assert {key: (r, b) for key, r, b in direct[DIMENSIONS.index(dimension)].top(ANSWERED)} == whole
    assert answer_of(daemon, "7d") == built

    daemon.save()
    saved = json.loads((tmp_path / "top.json").read_text())
    assert saved["open"] == [["a.example", T0]] and [h[:2] for h in saved["hours"]] == [["a.example", T0]]
    again = TrafficTop(str(tmp_path / "top.json"), lambda: now[0], lambda: "truncated")
    assert answer_of(again, "24h") == built and answer_of(again, "1h") == answer_of(daemon, "1h")

    now[0] += 30 * 60   # half an hour on: the hour's first minutes are forgotten, so it is sealed
    late = [(T0 + 3540, "a.example", "GET", "/late", 200, 5, "miss", "10.0.0.1", None, None)]
    for top in (daemon, again):
        top.record((T0 + 3600 + 1740, "a.example", "GET", "/hot/1", 200, 7, "hit", "10.0.0.1", None, None))
        top.take_pending()   # a new minute: the hour before is sealed
        assert ("a.example", T0) in top._hours and not top._built
        for row in late:     # a late report of one of the sealed hour's minutes
            top.record(row)
        top.take_pending()
        sealed = answer_of(top, "24h")
        assert sealed["top"]["/hot/1"] == (hot["/hot/1"][0] + 1, hot["/hot/1"][1] + 7)
        assert sealed["top"]["/hot/2"] == hot["/hot/2"]
        assert answer_of(top, "24h", "cache")["top"] == {"hit": (len(flat) + 1, sum(r[5] for r in flat) + 7),
                                                         "miss": (1, 5)}
        recent = [row for row in flat if row[0] >= T0 + 1800]   # the last hour's minutes: the hour's second half
        assert answer_of(top, "1h", "cache")["top"] == {"hit": (len(recent) + 1, sum(r[5] for r in recent) + 7),
                                                        "miss": (1, 5)}
    assert answer_of(daemon, "24h") == answer_of(again, "24h")


def test_a_save_that_kept_every_hour_is_read_as_it_was(tmp_path):
    """A traffic_top.json with no "open" list (an earlier release kept every hour itself, the current
    one too): its hours are kept as saved, and what is counted next is added to them."""
    now = T0 + 600.0
    summaries = [Summary.counted([key], [10], lambda values: values).dump()
                 for key in ("/old", "10.0.0.0/24", "", "200", "hit", None)]
    (tmp_path / "top.json").write_text(json.dumps({"version": 1, "minutes": [],
                                                   "hours": [["a.example", T0, summaries]]}))
    top = TrafficTop(str(tmp_path / "top.json"), lambda: now, lambda: "truncated")
    assert answer_of(top, "24h")["top"] == {"/old": (1, 10)}
    top.record((T0 + 300, "a.example", "GET", "/new", 200, 3, "hit", "10.0.0.1", None, None))
    assert answer_of(top, "24h")["top"] == {"/old": (1, 10), "/new": (1, 3)}
    assert answer_of(top, "1h")["top"] == {"/new": (1, 3)}
