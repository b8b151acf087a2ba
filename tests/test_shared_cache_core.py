"""The shared cache (core/shared_cache.py) over the real disk cache and a real scripted origin:
each case counts the origin's requests and reads what it was sent."""

import email.utils
import threading
import time

import pytest

from contentnode.core import http_cache as hc
from contentnode.core import netguard
from contentnode.core.cache import Cache
from contentnode.core.http_origin import HttpOrigin, HttpOriginConfig
from contentnode.core.http_pool import OriginPools
from contentnode.core.origin import OriginError
from contentnode.core.shared_cache import GatewayTimeout, Request, SharedCache
from tests.origin_server import OriginServer, http_bucket_record


class Clock:
    def __init__(self):
        self.t = float(int(time.time()))   # whole seconds, as Date is

    def __call__(self):
        return self.t


@pytest.fixture
def origin():
    with OriginServer() as server:
        yield server


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def shared(tmp_path, clock):
    return SharedCache(Cache(str(tmp_path / "cache"), 64 << 20, clock))


@pytest.fixture
def client(origin):
    return HttpOrigin(HttpOriginConfig.from_record(http_bucket_record(origin.url)), OriginPools(), netguard.OutboundPolicy())


NO_STALE = hc.StaleDefaults()


def get(shared, client, path, fields=None, cap=3600, defaults=NO_STALE):
    fields = {k.lower(): v for k, v in (fields or {}).items()}
    req = Request(("site.test", path, "", ""), fields, cap, defaults)
    sent = {k: v for k, v in fields.items() if k not in ("cache-control",)}
    exchange = shared.serve(req, lambda extra: client.forward("GET", path.lstrip("/"), headers={**sent, **extra}))
    body = exchange.result.read_all()
    return exchange, body


def test_fresh_answer_is_stored_and_hit_with_age(shared, client, origin, clock):
    origin.script("/a", b"hello", headers={"Cache-Control": "max-age=60"})
    first, body = get(shared, client, "/a")
    assert body == b"hello" and not first.hit
    assert first.cache_status == "contentnode; fwd=uri-miss; fwd-status=200; stored; ttl=60"
    clock.t += 10
    second, body = get(shared, client, "/a")
    assert body == b"hello" and second.hit and second.field("age") == "10" and second.field("via") == "1.1 contentnode"
    assert second.cache_status == "contentnode; hit; ttl=50"
    assert len(origin.requests_for("/a")) == 1


def test_no_store_and_private_are_asked_each_time(shared, client, origin):
    origin.script("/n", b"x", headers={"Cache-Control": "no-store"})
    origin.script("/p", b"x", headers={"Cache-Control": "private, max-age=60"})
    for path, why in (("/n", "no-store"), ("/p", "private")):
        for _ in range(2):
            exchange, body = get(shared, client, path)
            assert body == b"x" and not exchange.hit
            assert exchange.cache_status == f'contentnode; fwd=uri-miss; fwd-status=200; detail="{why}"'
        assert len(origin.requests_for(path)) == 2


def test_misses_of_a_key_not_stored_pass_on_their_own(shared, client, origin, clock):
    """After an answer that is not stored, the key's misses ask the origin each on its own (none
    waits for another's answer it could not share); an answer that may be stored again goes out
    uncached once, then the next miss fills the cache and the one after is a hit."""
    origin.script("/n", b"x", headers={"Cache-Control": "no-store"}, delay=1.0)
    assert get(shared, client, "/n")[1] == b"x"
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(get(shared, client, "/n"))) for _ in range(10)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert time.monotonic() - started < 1.9            # one origin delay, not two in a row
    assert [body for _, body in answers] == [b"x"] * 10 and len(origin.requests_for("/n")) == 11
    assert {e.cache_status for e, _ in answers} == {'contentnode; fwd=uri-miss; fwd-status=200; detail="no-store"'}
    origin.script("/n", b"y", headers={"Cache-Control": "max-age=60"})
    passed, body = get(shared, client, "/n")
    assert body == b"y" and passed.cache_status == "contentnode; fwd=uri-miss; fwd-status=200"
    filled, body = get(shared, client, "/n")
    assert body == b"y" and filled.cache_status == "contentnode; fwd=uri-miss; fwd-status=200; stored; ttl=60"
    hit, body = get(shared, client, "/n")
    assert body == b"y" and hit.hit and len(origin.requests_for("/n")) == 13
    origin.script("/m", b"m", headers={"Cache-Control": "no-store"})
    get(shared, client, "/m")
    clock.t += 11                                        # remembered for PASS_FOR seconds only
    assert not shared._passes(("site.test", "/m", "", ""))


def test_keys_not_stored_are_remembered_up_to_a_cap(shared, client, origin):
    from contentnode.core.shared_cache import PASS_KEYS
    for n in range(PASS_KEYS + 10):
        shared._note(("site.test", f"/k{n}", "", ""), passing=True)
    assert len(shared._passing) == PASS_KEYS and ("site.test", "/k0", "", "") not in shared._passing


def test_fifty_concurrent_requests_make_one_origin_request(shared, client, origin):
    origin.script("/slow", b"z" * 100_000, headers={"Cache-Control": "max-age=60"}, delay=0.5)
    bodies, errors = [], []

    def one():
        try:
            bodies.append(get(shared, client, "/slow")[1])
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
    threads = [threading.Thread(target=one) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and bodies == [b"z" * 100_000] * 50
    assert len(origin.requests_for("/slow")) == 1


def test_a_304_refreshes_the_stored_fields_and_no_body_moves(shared, client, origin, clock):
    origin.script("/v", b"v" * 1000, headers={"Cache-Control": "max-age=10", "X-Version": "1"}, etag='"e1"')
    get(shared, client, "/v")
    clock.t += 20
    origin.script("/v", b"v" * 1000, headers={"Cache-Control": "max-age=100", "X-Version": "2"}, etag='"e1"')
    again, body = get(shared, client, "/v")
    seen = origin.requests_for("/v")
    assert len(seen) == 2 and seen[1].headers.get("if-none-match") == '"e1"'
    assert body == b"v" * 1000 and again.field("x-version") == "2"
    # the 304's Date (the origin's real clock, stored by the refresh) is about 20 s behind this test's
    # cache clock: that is its apparent age (RFC 9111 §4.2.3), less a second for each second the real
    # clock ticked since the Clock began
    apparent_age = int(clock.t - email.utils.parsedate_to_datetime(again.field("date")).timestamp())
    ticked = int(time.time()) - int(clock.t - 20)
    assert 20 - ticked <= apparent_age <= 20
    assert again.cache_status == f"contentnode; fwd=stale; fwd-status=304; stored; ttl={100 - apparent_age}"
    clock.t += 50
    third, _ = get(shared, client, "/v")
    assert third.hit and len(origin.requests_for("/v")) == 2      # fresh for 100 s now


def test_vary_variants_are_stored_apart_and_purged_together(shared, client, origin):
    origin.script("/l", b"body", headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"})
    en, _ = get(shared, client, "/l", {"Accept-Language": "en"})
    fr, _ = get(shared, client, "/l", {"Accept-Language": "fr"})
    assert "fwd=uri-miss" in en.cache_status and "fwd=vary-miss" in fr.cache_status
    for lang in ("en", "fr"):
        assert get(shared, client, "/l", {"Accept-Language": lang})[0].hit
    langs = [s.headers.get("accept-language") for s in origin.requests_for("/l")]
    assert langs == ["en", "fr"]
    assert shared.cache.purge_url("site.test", "/l") == 2
    assert not get(shared, client, "/l", {"Accept-Language": "fr"})[0].hit


def test_vary_star_is_never_served_from_the_cache(shared, client, origin):
    origin.script("/s", b"s", headers={"Cache-Control": "max-age=60", "Vary": "*"})
    for _ in range(2):
        assert not get(shared, client, "/s")[0].hit
    assert len(origin.requests_for("/s")) == 2


def test_stale_if_error_serves_the_stored_answer_while_the_origin_is_down(shared, client, origin, clock):
    origin.script("/e", b"kept", headers={"Cache-Control": "max-age=10, stale-if-error=300"})
    get(shared, client, "/e")
    origin.stop()
    clock.t += 60
    exchange, body = get(shared, client, "/e")
    assert body == b"kept" and 'detail="stale-if-error"' in exchange.cache_status
    clock.t += 600                                      # beyond the window: the failure shows
    with pytest.raises(OriginError):
        get(shared, client, "/e")


def test_stale_if_error_covers_a_5xx_and_the_rule_default(shared, client, origin, clock):
    origin.script("/f", b"good", headers={"Cache-Control": "max-age=10"})
    get(shared, client, "/f", defaults=hc.StaleDefaults(if_error=100))
    origin.script("/f", b"down", status=503)
    clock.t += 30
    exchange, body = get(shared, client, "/f", defaults=hc.StaleDefaults(if_error=100))
    assert body == b"good" and exchange.cache_status.startswith("contentnode; fwd=stale; fwd-status=503")
    exchange, body = get(shared, client, "/f")           # no window: the 503 goes through
    assert exchange.status == 503 and body == b"down"


def test_stale_while_revalidate_answers_at_once_and_refreshes_behind(shared, client, origin, clock):
    origin.script("/w", b"old", headers={"Cache-Control": "max-age=10, stale-while-revalidate=60"})
    get(shared, client, "/w")
    origin.script("/w", b"new", headers={"Cache-Control": "max-age=10, stale-while-revalidate=60"})
    clock.t += 20
    exchange, body = get(shared, client, "/w")
    assert body == b"old" and exchange.hit and 'detail="stale-while-revalidate"' in exchange.cache_status
    deadline = time.monotonic() + 10
    while len(origin.requests_for("/w")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert get(shared, client, "/w")[1] == b"new"


def test_only_if_cached_without_an_entry_is_a_gateway_timeout(shared, client, origin):
    with pytest.raises(GatewayTimeout):
        get(shared, client, "/x", {"Cache-Control": "only-if-cached"})
    assert origin.requests_for("/x") == []


def test_a_trickling_origin_is_not_cut(shared, client, origin):
    origin.script("/t", b"t" * 200_000, headers={"Cache-Control": "max-age=60"}, rate=100_000)
    started = time.monotonic()
    exchange, body = get(shared, client, "/t")
    assert body == b"t" * 200_000 and time.monotonic() - started >= 1.5


def test_state_shows_the_decision(shared, client, origin, clock):
    origin.script("/d", b"d", headers={"Cache-Control": "max-age=60"}, etag='"d1"')
    req = Request(("site.test", "/d", "", ""), {}, 3600, hc.StaleDefaults())
    assert shared.state(req)["cached"] is False
    get(shared, client, "/d")
    clock.t += 5
    state = shared.state(req)
    assert state["cached"] and state["expires_in"] == 55 and state["etag"] == '"d1"' and state["freshness"] == "max-age"
    assert (state["status"], state["size"], state["lifetime"], state["vary"]) == (200, 1, 60, [])


def test_a_hit_reads_its_stored_answer_once_per_entry_and_a_refresh_reads_it_anew(shared, client, origin, clock):
    key = ("site.test", "/m", "", "")
    origin.script("/m", b"m" * 100, etag='"m1"', headers={
        "Cache-Control": 'max-age=30, no-cache="x-secret"', "Age": "5", "X-Secret": "s", "X-Version": "1"})
    get(shared, client, "/m")
    clock.t += 10
    first, _ = get(shared, client, "/m")
    memo = shared.cache.peek(key).memo
    assert first.hit and memo is not None
    clock.t += 5
    second, _ = get(shared, client, "/m")
    assert shared.cache.peek(key).memo is memo       # parsed once, kept with the entry
    # Age counts the origin's 5 s and the time since; no-cache="x-secret" keeps that field off a hit
    assert (first.field("age"), second.field("age")) == ("15", "20") and second.field("x-secret") is None
    assert second.validators() == {"etag": '"m1"', "last_modified": None}
    assert second.cache_status == "contentnode; hit; ttl=10"
    clock.t += 20
    origin.script("/m", b"m" * 100, etag='"m1"', headers={"Cache-Control": "max-age=100", "X-Version": "2"})
    refreshed, body = get(shared, client, "/m")
    assert body == b"m" * 100 and refreshed.field("x-version") == "2" and len(origin.requests_for("/m")) == 2
    third, _ = get(shared, client, "/m")
    assert third.hit and third.field("x-version") == "2" and shared.cache.peek(key).memo is not memo
