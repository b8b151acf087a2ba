"""Traffic counters and series: buckets, ranges, the domain bound, persistence."""

import json
import threading

import pytest

from contentnode.core.traffic import COUNTERS, MAX_RECORDED, Traffic


class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def traffic(tmp_path, clock):
    return Traffic(str(tmp_path / "traffic.json"), clock)


def last(answer):
    return answer["points"][-1]


def test_ranges_have_fixed_steps_and_zero_filled_points(traffic):
    for name, step, count in (("1h", 60, 60), ("24h", 300, 288), ("7d", 3600, 168)):
        answer = traffic.points(name)
        assert answer["range"] == name and answer["step_seconds"] == step
        assert len(answer["points"]) == count
        assert set(answer["points"][0]) == {"t", *COUNTERS}
        assert all(p["requests"] == 0 for p in answer["points"])
    with pytest.raises(KeyError):
        traffic.points("30d")


def test_record_counts_every_kind(traffic):
    traffic.record("a.com", 200, 1000, "hit")
    traffic.record("a.com", 206, 10, "miss")
    traffic.record("a.com", 404, 50)
    traffic.record("b.com", 502, 30, "miss")
    point = last(traffic.points("1h"))
    assert point == dict(point, requests=4, bytes_out=1090, cache_hits=1, cache_misses=2,
                         errors_4xx=1, errors_5xx=1)
    assert last(traffic.points("1h", "a.com"))["requests"] == 3
    totals = traffic.totals()
    assert totals["a.com"]["bytes_out"] == 1060 and totals["b.com"]["errors_5xx"] == 1
    assert traffic.domains() == ["a.com", "b.com"]


def test_points_move_into_the_past_and_fall_out(traffic, clock):
    clock.t = 1_700_000_000 - 1_700_000_000 % 3600      # start of an hour
    traffic.record("a.com", 200, 1)
    clock.t += 600
    traffic.record("a.com", 200, 1)
    one_hour = traffic.points("1h")["points"]
    assert [p["requests"] for p in one_hour][-11:] == [1] + [0] * 9 + [1]
    assert one_hour[-1]["t"].endswith("Z") and one_hour[-1]["t"][14:16] == "10"
    assert last(traffic.points("24h"))["requests"] == 1
    assert traffic.points("24h")["points"][-3]["requests"] == 1
    assert last(traffic.points("7d"))["requests"] == 2
    clock.t += 3600
    assert sum(p["requests"] for p in traffic.points("1h")["points"]) == 0
    assert sum(p["requests"] for p in traffic.points("24h")["points"]) == 2
    clock.t += 8 * 86400
    assert sum(p["requests"] for p in traffic.points("7d")["points"]) == 0


def test_domains_past_the_bound_count_as_other(tmp_path, clock):
    traffic = Traffic(str(tmp_path / "t.json"), clock, max_domains=2)
    for host in ("a.com", "b.com", "c.com", "d.com", "a.com", None):
        traffic.record(host, 200, 1)
    totals = traffic.totals()
    assert set(totals) == {"a.com", "b.com", "other"}
    assert totals["other"]["requests"] == 3 and totals["a.com"]["requests"] == 2
    assert last(traffic.points("1h"))["requests"] == 6


def test_history_survives_a_restart(tmp_path, clock):
    path = str(tmp_path / "t.json")
    first = Traffic(path, clock)
    first.record("a.com", 200, 123, "hit")
    clock.t += 300
    first.record("a.com", 500, 7, "miss")
    assert first.save() is True
    assert first.save() is False                       # nothing new since
    second = Traffic(path, clock)
    assert second.points("24h") == first.points("24h")
    assert second.points("1h", "a.com") == first.points("1h", "a.com")
    assert sum(p["bytes_out"] for p in second.points("7d")["points"]) == 130


def test_saved_file_is_json_and_pruned(tmp_path, clock):
    path = tmp_path / "t.json"
    traffic = Traffic(str(path), clock)
    traffic.record("a.com", 200, 1)
    clock.t += 30 * 86400
    traffic.record("a.com", 200, 1)
    traffic.save()
    saved = json.loads(path.read_text())
    assert saved["version"] == 1
    assert all(len(buckets) == 1 for buckets in saved["series"]["a.com"].values())
    assert (path.stat().st_mode & 0o777) == 0o600


def test_corrupt_file_is_set_aside(tmp_path, clock):
    path = tmp_path / "t.json"
    path.write_text("{not json")
    traffic = Traffic(str(path), clock)
    assert traffic.domains() == []
    assert (tmp_path / "t.json.corrupt").read_text() == "{not json"


def test_concurrent_records_are_all_counted(traffic):
    def worker():
        for _ in range(500):
            traffic.record("a.com", 200, 2, "hit")

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert traffic.totals()["a.com"] == dict(requests=4000, bytes_out=8000, cache_hits=4000,
                                             cache_misses=0, errors_4xx=0, errors_5xx=0)


def test_every_reader_sees_every_request_recorded_before_it(tmp_path, clock):
    """A request is appended and counted into the rows when read: each reader, the first thing
    after the requests, counts them all (below MAX_RECORDED, so only the read counts them)."""
    hit = dict(requests=2, bytes_out=20, cache_hits=2, cache_misses=0, errors_4xx=0, errors_5xx=0)
    readers = {"points": lambda t: {k: last(t.points("1h", "a.com"))[k] for k in COUNTERS},
               "totals": lambda t: t.totals()["a.com"],
               "domains": lambda t: t.domains() == ["a.com"] and hit}
    for name, read in readers.items():
        traffic = Traffic(str(tmp_path / f"{name}.json"), clock)
        traffic.record("a.com", 200, 10, "hit")
        traffic.record("a.com", 200, 10, "hit")
        assert read(traffic) == hit, name
    worker = Traffic(str(tmp_path / "worker.json"), clock)
    worker.record("a.com", 200, 10, "hit")
    worker.record("a.com", 404, 5)
    minute = int(clock.t) // 60 * 60
    assert worker.take_pending() == [["a.com", minute, [2, 15, 1, 0, 1, 0]]]
    assert worker.take_pending() == []
    daemon = Traffic(str(tmp_path / "daemon.json"), clock)
    daemon.record("b.com", 200, 1)            # before the merge: labelled first, as one by one
    daemon.merge_pending([["a.com", minute, [2, 15, 1, 0, 1, 0]]])
    daemon.record("a.com", 200, 1)
    assert daemon.save()
    saved = Traffic(daemon.path, clock)
    assert saved.domains() == ["a.com", "b.com"]
    assert last(saved.points("1h", "a.com"))["requests"] == 3 and last(saved.points("1h"))["requests"] == 4


def test_labels_are_given_in_the_order_of_each_domains_first_request(tmp_path, clock):
    traffic = Traffic(str(tmp_path / "t.json"), clock, max_domains=2)
    for domain, status, size in [("a.com", 200, 1), ("b.com", 404, 2), ("c.com", 200, 3), ("b.com", 200, 4),
                                 ("c.com", 200, 3), ("a.com", 200, 1)]:
        traffic.record(domain, status, size)
    totals = traffic.totals()
    assert sorted(totals) == ["a.com", "b.com", "other"]
    assert (totals["a.com"]["bytes_out"], totals["b.com"]["bytes_out"], totals["other"]["bytes_out"]) == (2, 6, 6)


def test_requests_past_the_bound_and_read_meanwhile_are_each_counted_once(tmp_path, clock):
    """Four threads record past MAX_RECORDED (counted by the recording thread) while another reads:
    the totals and the series equal counting each request one by one."""
    traffic = Traffic(str(tmp_path / "t.json"), clock)
    kinds = [("a.com", 200, 100, "hit"), ("a.com", 206, 7, "miss"), ("b.com", 404, 3, None),
             ("b.com", 503, 0, None), ("a.com", 304, 0, "hit")]
    per_thread = 3 * MAX_RECORDED
    done = threading.Event()

    def record(offset):
        for i in range(per_thread):
            domain, status, size, cache = kinds[(i + offset) % len(kinds)]
            traffic.record(domain, status, size, cache, clock.t + (i % 2) * 60)

    def read():
        while not done.is_set():
            traffic.totals()
            traffic.points("1h")

    reader = threading.Thread(target=read)
    reader.start()
    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    reader.join(60)
    expected = {"a.com": _empty_counts(), "b.com": _empty_counts()}
    for offset in range(4):
        for i in range(per_thread):
            domain, status, size, cache = kinds[(i + offset) % len(kinds)]
            counts = expected[domain]
            counts["requests"] += 1
            counts["bytes_out"] += size
            counts["cache_hits"] += cache == "hit"
            counts["cache_misses"] += cache == "miss"
            counts["errors_4xx"] += 400 <= status < 500
            counts["errors_5xx"] += status >= 500
    assert traffic.totals() == expected
    clock.t += 60
    assert [p["requests"] for p in traffic.points("1h")["points"][-2:]] == [2 * per_thread, 2 * per_thread]


def _empty_counts():
    return dict.fromkeys(COUNTERS, 0)
