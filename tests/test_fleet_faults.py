"""A fleet bucket that answers 500 or is slow (docs/API.md, "Fleet": bucket unreachable, slow
or answering errors): the replica keeps serving its last applied configuration, reports
bucket_error once, backs off, and recovers when the bucket answers again. Real daemons and
SeaweedFS, reached through a proxy that injects the faults (tests/peers/s3_faults.py)."""

import time

import pytest

from contentnode.fleet.service import BUCKET_TIMEOUT
from tests.fleet_setup import Fleet, wait_for
from tests.peers.s3_faults import FaultyProxy
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def proxy(seaweed):  # noqa: F811
    instance = FaultyProxy(seaweed.endpoint)
    yield instance
    instance.close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed, proxy):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed, replicas=1, host="faults.example.test", endpoint=proxy.endpoint)
    before = instance.seq()
    instance.site.add_rule("/", prefix="site/")
    instance.site.put("site/hello.txt", b"hello", "text/plain")
    instance.wait_synced(after=before)
    yield instance
    proxy.failing, proxy.delay = False, 0.0
    instance.close()


def _last_error(fleet) -> dict:
    return fleet.replica_admins[0].get("/api/fleet").json["last_error"] or {}


def _recovers(fleet, proxy, path: str) -> None:
    """The bucket answers again: the primary's next change reaches the replica and clears its error."""
    proxy.failing, proxy.delay = False, 0.0
    before = fleet.seq()
    fleet.site.add_rule(path, prefix="site/")
    fleet.wait_synced(timeout=30, after=before)
    assert fleet.served(fleet.replicas[0], f"{path}/hello.txt").body == b"hello"
    wait_for(lambda: not _last_error(fleet), 10, what="the replica's bucket_error cleared")


def test_a_bucket_answering_500_is_reported_once_backed_off_and_recovered_from(fleet, proxy):
    replica = fleet.replicas[0]
    logged = len(replica.log())
    proxy.failing = True
    started = time.monotonic()
    wait_for(lambda: _last_error(fleet).get("code") == "bucket_error", 10, what="the replica reporting bucket_error")
    time.sleep(9)
    window = time.monotonic() - started
    # every poll of 1 s would be `window` GETs of bundle.json per node; the backoff doubles the
    # wait (2, 4, 8 s). Two nodes ask: the replica, and the idle primary checking its bundle
    # (one conditional GET per poll), each backing off the same way.
    gets = proxy.requests(started, "/bundle.json")
    assert 2 <= gets <= 2 * (window / 2), (gets, window)
    assert fleet.served(replica, "/hello.txt").body == b"hello"
    assert replica.log()[logged:].count("event fleet_sync_failed") == 1
    assert "500" in _last_error(fleet)["message"] or "InternalError" in _last_error(fleet)["message"]
    _recovers(fleet, proxy, "/after-500")


def test_a_bucket_slower_than_the_timeout_is_an_error_and_serving_goes_on(fleet, proxy):
    replica = fleet.replicas[0]
    proxy.delay = BUCKET_TIMEOUT + 2
    error = wait_for(lambda: (e := _last_error(fleet)).get("code") == "bucket_error" and e, BUCKET_TIMEOUT + 10,
                     what="the replica reporting the slow bucket")
    assert f"{BUCKET_TIMEOUT:g} s" in error["message"], error
    assert fleet.served(replica, "/hello.txt").body == b"hello"
    _recovers(fleet, proxy, "/after-slow")


def test_an_idle_fleet_asks_for_the_bundle_once_per_node_and_poll_answered_304(fleet, proxy):
    """The primary checks its published bundle every poll (it republishes over a replaced one):
    while nothing changes that is one conditional GET per poll, answered 304, as the replica's."""
    proxy.failing, proxy.delay = False, 0.0
    wait_for(lambda: not _last_error(fleet), 15, what="the replica's bucket_error cleared")
    time.sleep(2)   # past any publish a previous test started
    started = time.monotonic()
    time.sleep(6)
    ended = time.monotonic()
    window = ended - started
    time.sleep(1)   # a request that arrived just before the end is answered before it is read
    answers = proxy.answers(started, "/bundle.json", until=ended)
    assert answers and all(a == (True, 304) for a in answers), answers
    # two nodes, poll 1 s: at most one request per node per poll (plus one each at the window's edges)
    assert len(answers) <= 2 * (window + 1), (len(answers), window)
