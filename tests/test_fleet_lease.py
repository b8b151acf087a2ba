"""fleet/probe and fleet/lease against a real SeaweedFS, and against an in-memory bucket
that ignores conditional writes (the fallback) or whose clock the test moves."""

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from contentnode.core import netguard, s3, s3_records
from contentnode.fleet import lease as leases_mod
from contentnode.fleet.lease import IssuerLeases, LeaseHeld
from contentnode.fleet.members import Authority, MemberKeys
from contentnode.fleet.probe import probe
from tests.peers.s3_stub import honouring_stub, ignoring_stub  # noqa: F401  (fixtures)

PREFIX = "contentnode/"
# a fleet before member lists: leases carry a MAC under a key derived from the fleet key
KEY = Authority(None, bytes(range(32)), "lease", {}, legacy=True)
CHECK_NAMES = ["create_once", "bucket_clock", "if_match", "conditional_delete", "race"]


def _client(definition: dict) -> s3.S3Client:
    config = s3_records.BucketConfig(definition["endpoint"], definition["region"], definition["bucket"],
                                     definition["access_key"], definition["secret_key"], True)
    return s3.S3Client(config, netguard.OutboundPolicy(), timeout=10)


@pytest.fixture
def weed_client(seaweed):
    bucket = "lease-" + uuid.uuid4().hex[:12]
    seaweed.create_bucket(bucket)
    return _client(seaweed.bucket_definition(bucket))


# --- the probe


def test_probe_finds_seaweedfs_honours_conditional_writes(weed_client):
    result = probe(weed_client, PREFIX, time.time())
    assert result["conditional_writes"] is True, result
    assert [c["name"] for c in result["checks"]] == CHECK_NAMES
    assert all(c["ok"] for c in result["checks"])
    assert "exactly one won" in result["checks"][-1]["detail"]
    assert result["probed_at"].endswith("Z")
    assert weed_client.list_objects(prefix=PREFIX).keys == []  # scratch objects removed


def test_probe_finds_a_bucket_that_ignores_conditions(ignoring_stub):
    client = _client(ignoring_stub.bucket_definition("fleet"))
    result = probe(client, PREFIX, time.time())
    assert result["conditional_writes"] is False
    first = result["checks"][0]
    assert first["name"] == "create_once" and first["ok"] is False
    assert "ignores the condition" in first["detail"]
    assert ignoring_stub.objects == {}  # scratch objects removed


def test_probe_passes_on_the_stub_that_honours_conditions(honouring_stub):
    """The stub used for the clock tests below behaves as S3 does."""
    result = probe(_client(honouring_stub.bucket_definition("fleet")), PREFIX, time.time())
    assert result["conditional_writes"] is True, result


def test_probe_of_an_unreachable_bucket_says_no(ignoring_stub):
    definition = ignoring_stub.bucket_definition("fleet")
    ignoring_stub.close()
    result = probe(_client(definition), PREFIX, time.time())
    assert result["conditional_writes"] is False
    assert result["checks"][0]["ok"] is False and result["checks"][0]["code"] == "connect"


# --- the lease


def test_lease_is_exclusive_refreshed_and_released(weed_client):
    first = IssuerLeases(weed_client, PREFIX, "node-a", KEY)
    second = IssuerLeases(weed_client, PREFIX, "node-b", KEY)
    lease = first.acquire("acme-shop.example.test")
    with pytest.raises(LeaseHeld) as held:
        second.acquire("acme-shop.example.test")
    assert held.value.holder == "node-a" and 0 < held.value.expires_in <= leases_mod.DEFAULT_TTL
    before = lease.etag
    assert first.refresh(lease) is True and lease.etag  # rewritten on its ETag
    stored = json.loads(weed_client.get_bytes(first.key(lease.name)).body)
    assert stored["holder"] == "node-a" and stored["token"] == lease.token
    assert before  # an ETag was held from the start
    first.release(lease)
    assert weed_client.get_bytes(first.key(lease.name)) is None
    taken = second.acquire("acme-shop.example.test")  # free again
    second.release(taken)


def test_a_stale_lease_is_taken_over_and_its_old_holder_cannot_touch_it(weed_client):
    old = IssuerLeases(weed_client, PREFIX, "node-a", KEY, ttl=1)
    new = IssuerLeases(weed_client, PREFIX, "node-b", KEY, ttl=60)
    stale = old.acquire("acme-x")
    time.sleep(2.5)  # Last-Modified and Date have one-second resolution
    fresh = new.acquire("acme-x")
    assert old.refresh(stale) is False and stale.lost.is_set()
    old.release(stale)  # lost: must not delete the new holder's lease
    assert json.loads(weed_client.get_bytes(new.key("acme-x")).body)["holder"] == "node-b"
    with pytest.raises(LeaseHeld):
        old.acquire("acme-x")
    new.release(fresh)


def test_two_takers_of_a_stale_lease_exactly_one_wins(weed_client):
    IssuerLeases(weed_client, PREFIX, "node-dead", KEY, ttl=1).acquire("acme-y")
    time.sleep(2.5)
    takers = [IssuerLeases(weed_client, PREFIX, f"node-{i}", KEY) for i in range(4)]
    start = threading.Barrier(len(takers))
    won, lost = [], []

    def take(leases):
        start.wait(10)
        try:
            won.append(leases.acquire("acme-y"))
        except LeaseHeld:
            lost.append(leases.holder)

    threads = [threading.Thread(target=take, args=(t,)) for t in takers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(won) == 1 and len(lost) == 3
    holder = json.loads(weed_client.get_bytes(takers[0].key("acme-y")).body)["holder"]
    assert holder not in lost


def test_staleness_is_judged_by_the_buckets_clock(honouring_stub):
    client = _client(honouring_stub.bucket_definition("fleet"))
    holder = IssuerLeases(client, PREFIX, "node-a", KEY, ttl=60)
    other = IssuerLeases(client, PREFIX, "node-b", KEY, ttl=60)
    holder.acquire("acme-z")
    honouring_stub.clock_offset = -7200  # the bucket's clock far behind ours: the lease is still fresh
    with pytest.raises(LeaseHeld):
        other.acquire("acme-z")
    honouring_stub.clock_offset = 120  # two minutes pass on the bucket's clock only
    taken = other.acquire("acme-z")
    assert json.loads(honouring_stub.objects["/fleet/contentnode/leases/acme-z.json"][0])["token"] == taken.token


def test_holding_refreshes_while_the_block_runs(honouring_stub):
    client = _client(honouring_stub.bucket_definition("fleet"))
    leases = IssuerLeases(client, PREFIX, "node-a", KEY, ttl=0.4)
    key = "/fleet/contentnode/leases/acme-r.json"
    with leases.holding("acme-r") as lease:
        first = honouring_stub.objects[key][2]
        time.sleep(0.5)  # refreshes every ttl/4
        assert honouring_stub.objects[key][2] > first and not lease.lost.is_set()
    assert key not in honouring_stub.objects  # released


# --- two processes racing


RACER = r"""
import json, sys, time
from contentnode.core import netguard, s3, s3_records
from contentnode.fleet.lease import IssuerLeases, LeaseHeld
from contentnode.fleet.members import Authority
cfg = json.loads(sys.argv[1])
client = s3.S3Client(s3_records.BucketConfig(cfg["endpoint"], cfg["region"], cfg["bucket"], cfg["access_key"],
                                             cfg["secret_key"], True), netguard.OutboundPolicy(), timeout=10)
prefix = "contentnode/"
leases = IssuerLeases(client, prefix, cfg["node"], Authority(None, bytes(32), "lease", {}, legacy=True))
time.sleep(max(0.0, cfg["start_at"] - time.time()))
for host in cfg["hosts"]:
    marker = prefix + "issued/" + host   # stands for the certificate an order leaves
    for attempt in range(100):  # a lost race waits for the holder, then looks again
        try:
            with leases.holding("acme-" + host):
                if client.get_bytes(marker) is not None:
                    print(host, "found", flush=True)
                else:
                    time.sleep(0.3)  # the order
                    client.put_object(marker, cfg["node"].encode(), "text/plain")
                    print(host, "ordered", flush=True)
            break
        except LeaseHeld:
            time.sleep(0.1)
"""


def test_two_processes_racing_for_the_lease_exactly_one_orders(seaweed):
    bucket = "race-" + uuid.uuid4().hex[:12]
    seaweed.create_bucket(bucket)
    hosts = [f"h{i}.example.test" for i in range(4)]
    start_at = time.time() + 1.5
    procs = []
    for node in ("node-a", "node-b"):
        cfg = dict(seaweed.bucket_definition(bucket), node=node, hosts=hosts, start_at=start_at)
        procs.append(subprocess.Popen([sys.executable, "-c", RACER, json.dumps(cfg)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, cwd=os.getcwd()))
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    lines = [line.split() for out, _ in outputs for line in out.splitlines()]
    for host in hosts:
        outcomes = sorted(outcome for name, outcome in lines if name == host)
        assert outcomes == ["found", "ordered"], (host, outputs)
    client = _client(seaweed.bucket_definition(bucket))
    assert client.list_objects(prefix=PREFIX + "leases/").keys == []  # every lease released


def test_a_forged_lease_neither_blocks_an_order_nor_reaches_its_text(weed_client):
    """A bucket writer without the fleet key writes a fresh lease claiming an hour: it was honoured
    (LeaseHeld for as long as it was rewritten, its holder text in the 409); now it is stale at once."""
    lure = "evil\nLog in at http://evil.example/fix"
    forged = json.dumps({"holder": lure, "token": "x", "ttl_seconds": 3600}).encode()
    weed_client.put_object(PREFIX + "leases/acme-z.json", forged, "application/json")
    leases = IssuerLeases(weed_client, PREFIX, "node-a", KEY, ttl=60)
    seen = leases.read("acme-z")
    assert seen is not None and seen.stale and seen.holder is None
    lease = leases.acquire("acme-z")
    assert leases.read("acme-z").holder == "node-a"
    leases.release(lease)
    # a lease written under another fleet's key is a forgery too
    IssuerLeases(weed_client, PREFIX, "node-x", Authority(None, bytes(32), "lease", {}, legacy=True),
                 ttl=3600).acquire("acme-w")
    other = leases.read("acme-w")
    assert other.stale and other.holder is None


def test_a_lease_counts_only_when_signed_by_a_listed_member(weed_client):
    """With member lists, a lease is signed by its holder's own key: one signed by a node that is
    not (or no longer) listed is stale at once, as is one whose holder names a member it is not."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
    a, removed = (MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate()) for _ in range(2))
    known = {"node-a": a.public()["sign"]}
    holder = IssuerLeases(weed_client, PREFIX, "node-a", Authority(a, None, "lease", known, legacy=False), ttl=60)
    gone = IssuerLeases(weed_client, PREFIX, "node-r", Authority(removed, None, "lease", known, legacy=False), ttl=3600)
    lease = holder.acquire("acme-m")
    assert holder.read("acme-m").holder == "node-a" and not holder.read("acme-m").stale
    holder.release(lease)
    gone.acquire("acme-n")   # a removed node's lease, fresh, claiming an hour
    seen = holder.read("acme-n")
    assert seen.stale and seen.holder is None
    taken = holder.acquire("acme-n")
    assert holder.read("acme-n").holder == "node-a"
    holder.release(taken)
    # signed by a listed member's key, but naming another holder: not a lease of that member
    liar = IssuerLeases(weed_client, PREFIX, "node-b", Authority(a, None, "lease", known, legacy=False), ttl=3600)
    liar.acquire("acme-o")
    assert holder.read("acme-o").stale
