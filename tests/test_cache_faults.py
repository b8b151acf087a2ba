"""Fault injection on the cache shared by real processes: a seeded schedule of fills, hits,
purges (all, prefix, URL), evictions at a tiny cap, origin objects changing version, and kill -9
of workers and of the daemon, some in the middle of a fill. After every step:

- a URL purged in an earlier step is never answered with a version older than the origin's at
  the purge;
- every body answered is exactly a version the origin served for that URL;
- the folder never holds more than the cap plus one entry in flight;
- the books equal the folder (after a kill, once the daemon has settled them, as it does when a
  worker dies).

CACHE_FAULTS_SEED=<n> replays a schedule; CACHE_FAULTS_STEPS=<n> runs longer. The seed is in
every failure message.
"""

import os
import random
import time

import pytest

from tests.cache_procs import CacheProcess, FileOrigin, disk_bytes

HOST = "cdn.example.test"
WORKERS = 3
CAP = 10_000
URLS = [f"/{group}/{n}" for group in "ab" for n in range(8)]
MAX_OBJECT = 2500
HEADER_ROOM = 400          # an entry file's header, beside its body
STEPS = int(os.environ.get("CACHE_FAULTS_STEPS", "2000"))


class Schedule:
    """The driver: processes, the origin's versions and what every answer must satisfy."""

    def __init__(self, tmp_path, seed: int):
        self.seed, self.rng = seed, random.Random(seed)
        self.root = str(tmp_path / "cache")
        self.origin = FileOrigin(str(tmp_path / "origin"))
        self.versions = {url: 0 for url in URLS}      # the origin's current version
        self.bodies: dict[tuple, str] = {}             # (url, version) -> body
        self.floor = {url: 0 for url in URLS}          # oldest version allowed after the purges so far
        for url in URLS:
            self.new_version(url)
        self.daemon = self.spawn(None)
        self.workers = {slot: self.spawn(slot) for slot in range(1, WORKERS + 1)}
        self.step = 0
        self.counts = {"get": 0, "hit": 0, "purge": 0, "kill": 0, "restart": 0, "version": 0}

    def spawn(self, slot):
        return CacheProcess(self.root, self.origin, CAP, WORKERS + 1, slot)

    def new_version(self, url):
        self.versions[url] += 1
        version = self.versions[url]
        size = self.rng.randint(50, MAX_OBJECT)
        head = f"{url}|v{version}|"
        body = (head + "x" * size)[:max(size, len(head))]
        self.bodies[url, version] = body
        self.origin.put(HOST, url, body.encode())

    def check(self, condition, message):
        assert condition, f"seed {self.seed}, step {self.step}: {message}"

    def processes(self):
        return [self.daemon, *self.workers.values()]

    # -- one step: a batch of concurrent operations -------------------------------

    def run_step(self):
        self.step += 1
        if self.rng.random() < 0.15:
            self.new_version(self.rng.choice(URLS))
            self.counts["version"] += 1
        roll = self.rng.random()
        if roll < 0.012:
            self.kill_in_flight(daemon=False)
        elif roll < 0.018:
            self.kill_in_flight(daemon=True)
        else:
            self.batch()
        self.check_folder()

    def batch(self):
        sent, purges, holds = [], [], []
        for _ in range(self.rng.randint(1, 4)):
            process = self.rng.choice(self.processes())
            if self.rng.random() < 0.12:
                purges.append(self.send_purge(process))
                continue
            url = self.rng.choice(URLS)
            if self.rng.random() < 0.2:   # keep this fill in flight a moment, beside the batch's purges
                holds.append(self.origin.hold(HOST, url, self.origin.fetches(HOST, url) + 1))
            ttl = 0 if self.rng.random() < 0.05 else 600
            sent.append((process, url, process.send("get", host=HOST, path=url, ttl=ttl,
                                                     first_half_then_close=False)))
        if holds:
            time.sleep(0.002)
            for marker in holds:
                _unlink(marker)
        for process, url, number in sent:
            self.check_answer(url, process.wait(number))
        for process, number, matched in purges:
            process.wait(number)
            for url in matched:   # from the next step on, nothing older than this may be answered
                self.floor[url] = max(self.floor[url], self.versions_at_purge[url])

    def send_purge(self, process):
        kind = self.rng.choice(["all", "prefix", "url", "url"])
        if kind == "all":
            matched, args = URLS, {}
        elif kind == "prefix":
            prefix = self.rng.choice(["/a/", "/b/", "/a/1", "/"])
            matched, args = [u for u in URLS if u.startswith(prefix)], {"host": HOST, "prefix": prefix}
        else:
            url = self.rng.choice(URLS)
            matched, args = [url], {"host": HOST, "path": url}
        self.versions_at_purge = dict(self.versions)
        self.counts["purge"] += 1
        return process, process.send("purge", kind=kind, **args), matched

    def check_answer(self, url, answer):
        self.counts["get"] += 1
        self.counts["hit"] += answer["hit"]
        self.check(answer["status"] == 200, f"{url} answered {answer['status']}")
        body = answer["body"]
        version = int(body.split("|")[1][1:]) if body.startswith(url + "|v") else None
        self.check(version is not None and self.bodies.get((url, version)) == body,
                   f"{url}: a body the origin never served: {body[:40]!r}")
        self.check(version >= self.floor[url],
                   f"{url}: version {version} answered after a purge at version {self.floor[url]}"
                   f" ({'hit' if answer['hit'] else 'fill'})")

    def kill_in_flight(self, daemon: bool):
        """kill -9 of a worker (or the daemon) while a worker's fill is held mid-body."""
        slot = self.rng.choice(list(self.workers))
        filler = self.workers[slot] if not daemon else self.rng.choice(list(self.workers.values()))
        url = self.rng.choice(URLS)
        fetches = self.origin.fetches(HOST, url)
        marker = self.origin.hold(HOST, url, fetches + 1)
        number = filler.send("get", host=HOST, path=url, ttl=600, first_half_then_close=False)
        deadline = time.monotonic() + 1.0
        while self.origin.fetches(HOST, url) == fetches and time.monotonic() < deadline:
            time.sleep(0.001)   # a hit never fetches: then the kill lands between fills
        if daemon:
            self.daemon.kill()
            self.daemon = self.spawn(None)      # started while the worker still fills
            self.counts["restart"] += 1
            _unlink(marker)
            self.check_answer(url, filler.wait(number))
        else:
            self.workers[slot].kill()
            _unlink(marker)
            self.daemon.call("settle")          # what the daemon does when a worker dies
            self.workers[slot] = self.spawn(slot)
            self.counts["kill"] += 1

    def check_folder(self):
        on_disk = disk_bytes(self.root)
        self.check(on_disk <= CAP + MAX_OBJECT + HEADER_ROOM, f"{on_disk} bytes in the folder, cap {CAP}")
        books = self.daemon.call("stats")
        self.check(books["total"] == disk_bytes(self.root),
                   f"the books say {books['total']} bytes, the folder holds {disk_bytes(self.root)}")
        self.check(books["total"] <= CAP, f"the books count {books['total']} bytes over the cap {CAP}")

    def close(self):
        for process in self.processes():
            process.close()


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@pytest.fixture
def seed():
    return int(os.environ.get("CACHE_FAULTS_SEED") or random.SystemRandom().randrange(1 << 32))


def test_seeded_faults_keep_purges_budget_and_books(tmp_path, seed):
    schedule = Schedule(tmp_path, seed)
    started = time.monotonic()
    try:
        while schedule.step < STEPS:
            schedule.run_step()
    finally:
        schedule.close()
    took = time.monotonic() - started
    print(f"seed {seed}: {schedule.step} steps in {took:.1f} s, {schedule.counts}")
    counts = schedule.counts
    assert counts["hit"] > counts["get"] // 5, f"seed {seed}: too few hits to exercise anything: {counts}"
    assert counts["kill"] and counts["restart"] and counts["purge"] > 50, f"seed {seed}: {counts}"
