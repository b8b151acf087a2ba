"""A bucket writer without the fleet's keys cannot exhaust a node (issue 32): forged node statuses
and a 16 MiB junk bundle.json grow neither the primary's nor a replica's memory by more than
20 MB, GET /api/fleet stays small, and no attacker-written text reaches an answer. Real daemons,
SeaweedFS as the bucket; memory is the daemons' RSS, sampled while they read the junk."""

import functools
import json
import threading
import time

import pytest

from contentnode.clock import rfc3339
from contentnode.fleet import members
from tests.fleet_setup import Fleet, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.test_wire_limits import _rss_kib

GROWTH_BOUND_KIB = 20 * 1024
FORGED_STATUSES = 200
EVIL = "Log in at http://evil.example/fix"


class Peak:
    """The highest RSS of some processes, sampled every 50 ms while the block runs."""

    def __init__(self, nodes):
        self.pids = [n.proc.pid for n in nodes]
        self.before = {pid: _rss_kib(pid) for pid in self.pids}
        self.peak = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.wait(0.05):
            for pid in self.pids:
                self.peak[pid] = max(self.peak[pid], _rss_kib(pid))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def growth(self, node) -> int:
        return self.peak[node.proc.pid] - self.before[node.proc.pid]


@pytest.fixture
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=1, host="caps.example.test")
    yield instance
    instance.close()


def forged_status(node_id: str) -> bytes:
    """About 60 KB of many small JSON values (what costs a parser the most memory) and a lure. The
    200 differ only in node_id: the rest is encoded once (building it 200 times was 3 s of CPU)."""
    return _forged_status_template().replace(b'"NODE_ID"', json.dumps(node_id).encode(), 1)


@functools.cache
def _forged_status_template() -> bytes:
    doc = {"node_id": "NODE_ID", "name": EVIL, "role": "replica", "version": "0", "seq": 1,
           "last_error": {"code": "x", "message": EVIL}, "seen_at": "2020-01-01T00:00:00Z",
           "traffic": {f"k{i}": [i, {"a": 1}] for i in range(3500)}}
    return json.dumps(doc, separators=(",", ":")).encode()


def junk_bundle() -> bytes:
    """16 MiB of valid JSON that is two million small objects."""
    item = b'{"a":1},'
    body = b'{"junk":[' + item * ((16 << 20) // len(item) - 4)
    return body.rstrip(b",") + b"]}"


def test_forged_statuses_and_a_junk_bundle_hold_little_memory(fleet):
    client = fleet.bucket_client()
    replica = fleet.replica_admins[0]
    time.sleep(4)   # a few polls and status rounds first: the baseline is a node at work
    with Peak([fleet.primary, *fleet.replicas]) as peak:
        for i in range(FORGED_STATUSES):
            client.put_object(f"contentnode/nodes/{i:016x}.json", forged_status(f"{i:016x}"), "application/json")
        junk = junk_bundle()
        assert len(junk) <= 16 << 20
        for _ in range(2):   # each rewrite is a new ETag: read again
            with fleet.primary_paused():   # the live primary writes over a bundle it did not write
                client.put_object("contentnode/bundle.json", junk, "application/json")
                wait_for(lambda: (replica.get("/api/fleet").json["last_error"] or {}).get("code") == "malformed",
                         20, what="the replica refusing the junk bundle")
            time.sleep(3)   # continued, the primary reads the junk at its next poll and publishes over it
        before = fleet.seq()
        fleet.site.add_rule("/after/", prefix="site/")   # the primary reads bundle.json before it publishes
        fleet.wait_synced(30, after=before)
        time.sleep(4)   # the primary reads the statuses every third poll
        answer = fleet.admin.get("/api/fleet")
    assert answer.status == 200 and answer.json["unknown_statuses"] == FORGED_STATUSES
    assert [row["node_id"] for row in answer.json["nodes"]] == [fleet.state(fleet.replicas[0])["node"]["id"]]
    assert len(answer.body) < 64 << 10, len(answer.body)
    assert EVIL.encode() not in answer.body
    for node in (fleet.primary, fleet.replicas[0]):
        assert peak.growth(node) <= GROWTH_BOUND_KIB, (node.workdir, peak.growth(node), peak.before)


def test_statuses_not_signed_by_a_member_are_counted_never_listed_or_told(fleet):
    """Statuses of the right shape, written by a bucket writer without a member's key: the primary
    lists only the real replica, counts the others, and no notification carries their text."""
    client = fleet.bucket_client()
    replica_id = fleet.state(fleet.replicas[0])["node"]["id"]
    logged = len(fleet.primary.log())
    for i in range(20):
        node_id = f"{i:016x}"
        doc = {"node_id": node_id, "name": EVIL, "role": "replica", "version": "0", "seq": 1,
               "last_error": {"code": "x", "message": EVIL, "at": "2020-01-01T00:00:00Z"},
               "seen_at": "2020-01-01T00:00:00Z", "poll_seconds": 1, "mac": "AAAA"}
        client.put_object(f"contentnode/nodes/{node_id}.json", json.dumps(doc).encode(), "application/json")
    answer = wait_for(lambda: (a := fleet.admin.get("/api/fleet").json)["unknown_statuses"] == 20 and a, 20,
                      what="the primary counting 20 unknown statuses")
    assert [row["node_id"] for row in answer["nodes"]] == [replica_id]
    time.sleep(4)   # a few more status rounds: any notification would be out by now
    assert EVIL not in fleet.primary.log()[logged:] and EVIL not in json.dumps(answer)


def test_many_nodes_with_problems_are_one_message_without_their_text(fleet):
    """30 members' statuses (each signed by the member's own key) reporting errors, with a lure as
    name and message: one fleet_node_problem per status round (the writes may straddle two rounds; it was
    one a node) naming each of the 30 once by id, none of their text."""
    client = fleet.bucket_client()
    made = fleet.add_members(30)
    logged = len(fleet.primary.log())
    ids = [node_id for node_id, _ in made]
    now = rfc3339(time.time())
    for node_id, member in made:
        doc = {"node_id": node_id, "name": EVIL, "role": "replica", "version": "0", "seq": 1, "applied_at": now,
               "last_error": {"code": "restore_checks", "message": EVIL, "at": now}, "seen_at": now,
               "poll_seconds": 3600, "health": {"ready": True, "bundle_seen_at": now}, "traffic": {},
               "certificates": {}}
        signed = members.Authority(member, None, "status", {}, legacy=False).write(doc)
        client.put_object(f"contentnode/nodes/{node_id}.json", signed, "application/json")

    def told():
        return [x for x in fleet.primary.log()[logged:].splitlines() if "event fleet_node_problem" in x]

    wait_for(lambda: sum(line.count(f"{i}: error") for line in told() for i in ids) == 30, 20,
             what="the primary notifying every node")
    time.sleep(4)   # more status rounds: no more messages
    lines = told()
    assert len(lines) <= 2, lines
    assert all(sum(line.count(f"{i}: error: it reports restore_checks") for line in lines) == 1 for i in ids)
    assert EVIL not in fleet.primary.log()[logged:]
