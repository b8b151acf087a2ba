"""fleet/challenges: an HTTP-01 answer published by the issuer, read through by another node
from a bucket (the in-memory stub, whose request log shows what the read-through costs)."""

import threading
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.core import netguard, s3, s3_records
from contentnode.core.acme import ChallengeStore
from contentnode.fleet import challenges, keys
from contentnode.fleet.wire import Refused
from contentnode.fleet.challenges import PublishingChallenges, ReadThrough
from tests.peers.s3_stub import honouring_stub  # noqa: F401  (fixture)

PREFIX = "contentnode/"
FLEET = "fleet-1"
TOKEN = "tok_" + "A" * 40
THUMB = "T" * 43


@pytest.fixture
def stub(honouring_stub):  # noqa: F811
    return honouring_stub


def _client(stub):
    d = stub.bucket_definition("fleet")
    return s3.S3Client(s3_records.BucketConfig(d["endpoint"], d["region"], d["bucket"], d["access_key"],
                                               d["secret_key"], True), netguard.OutboundPolicy(), timeout=5)


def _verifier(key):
    def verify(data, signature):
        try:
            keys.verify(keys.public_text(key), signature, data, "challenge")
            return True
        except Refused:
            return False
    return verify


def _signer(key):
    return lambda data: keys.sign(key, data)


@pytest.fixture
def fleet(stub):
    key = Ed25519PrivateKey.generate()
    client = _client(stub)
    issuer = PublishingChallenges(ChallengeStore(), lambda: (client, PREFIX, FLEET, _signer(key)), time.time)
    reader = ReadThrough(lambda: (client, PREFIX, FLEET, _verifier(key)), time.time)
    return issuer, reader, key, client


def test_an_answer_published_after_a_miss_is_served_within_a_second(fleet, stub):
    issuer, reader, _, _ = fleet
    assert reader.get(TOKEN) is None  # asked before the issuer published
    issuer.put(TOKEN, f"{TOKEN}.{THUMB}")
    assert issuer.get(TOKEN) == f"{TOKEN}.{THUMB}"  # the issuer answers from its own store
    # a miss is not kept; the listing of the tokens is at most LIST_SECONDS old: a read after this
    # deadline must list and fetch again (one more read after it, however late a sleep ends)
    deadline = time.monotonic() + challenges.LIST_SECONDS + 0.1
    while True:
        answer = reader.get(TOKEN)
        if answer is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert answer == f"{TOKEN}.{THUMB}"
    reads = [entry for entry in stub.log if entry[0] == "GET"]
    for _ in range(5):
        assert reader.get(TOKEN) == f"{TOKEN}.{THUMB}"
    assert [entry for entry in stub.log if entry[0] == "GET"] == reads  # cached
    issuer.remove(TOKEN)
    assert stub.objects == {}


@pytest.mark.parametrize("tamper", ["signature", "other_key", "other_fleet", "expired", "other_token",
                                    "not_a_key_authorization"])
def test_an_answer_that_is_not_the_fleets_is_refused(fleet, stub, tamper):
    issuer, reader, key, client = fleet
    sign = _signer(Ed25519PrivateKey.generate() if tamper == "other_key" else key)
    fleet_id = "fleet-2" if tamper == "other_fleet" else FLEET
    expires = int(time.time()) - 1 if tamper == "expired" else int(time.time()) + 600
    token = "x" * 30 if tamper == "other_token" else TOKEN
    answer = "garbage" if tamper == "not_a_key_authorization" else f"{token}.{THUMB}"
    body = challenges.encode(fleet_id, token, answer, expires, sign)
    if tamper == "signature":
        body = body.replace(THUMB.encode(), b"U" * 43)
    client.put_object(challenges.object_key(PREFIX, TOKEN), body, "application/json")
    assert reader.get(TOKEN) is None


def test_tokens_acme_never_uses_reach_no_bucket(fleet, stub):
    _, reader, _, _ = fleet
    for token in ["short", "../../etc/passwd", "a" * 129, "bad token with spaces xx", "%2e%2e" * 5]:
        assert reader.get(token) is None
    assert stub.log == []


def test_concurrent_asks_for_one_token_share_one_bucket_read(fleet, stub):
    issuer, reader, _, _ = fleet
    issuer.put(TOKEN, f"{TOKEN}.{THUMB}")
    stub.log.clear()
    start = threading.Barrier(6)
    answers = []

    def ask():
        start.wait(5)
        answers.append(reader.get(TOKEN))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert answers == [f"{TOKEN}.{THUMB}"] * 6
    assert len([e for e in stub.log if e[0] == "GET" and "list-type" not in e[1]]) == 1   # the object, once


def test_random_tokens_cost_at_most_the_lookup_rate(fleet, stub):
    _, reader, _, _ = fleet
    started = time.monotonic()
    for i in range(3 * challenges.LOOKUPS_PER_SECOND):
        assert reader.get(f"random-token-{i:06d}-xxxxx") is None
    seconds = int(time.monotonic() - started) + 1
    assert len(stub.log) <= challenges.LOOKUPS_PER_SECOND * (seconds + 1)
    assert len(stub.log) < 3 * challenges.LOOKUPS_PER_SECOND


def test_a_node_outside_a_fleet_reads_nothing(stub):
    reader = ReadThrough(lambda: None, time.time)
    assert reader.get(TOKEN) is None
    assert stub.log == []


def test_a_flood_of_unknown_tokens_never_starves_a_real_one(fleet, stub):
    """40+ random tokens a second from many addresses (the shared 20 reads/s budget made every real
    answer 404, and misses evicted answers): each answer published during the flood is served at
    once and at every later ask, and the flood itself costs few bucket reads."""
    issuer, reader, _, _ = fleet
    stop = threading.Event()

    def flood():
        i = 0
        while not stop.is_set():
            reader.get("rnd_" + f"{i:040d}", f"198.51.100.{i % 50}")
            i += 1
            time.sleep(0.005)

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(2)]
    for thread in flooders:
        thread.start()
    try:
        time.sleep(1)
        served = []
        for n in range(4):
            token = "real_" + chr(ord("A") + n) * 40
            issuer.put(token, f"{token}.{THUMB}")
            for _ in range(3):
                time.sleep(0.3)
                served.append(reader.get(token, "192.0.2.1") == f"{token}.{THUMB}")
        assert served == [True] * 12, served
    finally:
        stop.set()
        for thread in flooders:
            thread.join()
