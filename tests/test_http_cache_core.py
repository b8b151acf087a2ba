"""The shared-cache rules of core/http_cache.py, each case taken from the RFC text it quotes."""

import pytest

from contentnode.core import http_cache as hc

NOW = 1_700_000_000.0
DATE = hc.format_date(NOW)
NONE = hc.StaleDefaults()


def ok(status=200, req=None, **resp):
    return hc.storable("GET", status, req or {}, {k.replace("_", "-"): v for k, v in resp.items()})


# ---- parsing -----------------------------------------------------------------------------------

def test_directives_are_case_insensitive_and_the_first_of_a_repeat_counts():
    # RFC 9111 §5.2: "Cache directives are case-insensitive"; §4.2.1: "either the first occurrence should be used"
    assert hc.directives('Max-Age=60, PUBLIC, max-age=5, no-cache="Set-Cookie, X-A"') == {
        "max-age": "60", "public": None, "no-cache": "Set-Cookie, X-A"}
    assert hc.directives("") == {}
    assert hc.directives(' , ,max-age = 7 ,') == {"max-age": "7"}


def test_delta_seconds_refuses_what_is_not_digits_and_caps_overflow():
    # RFC 9111 §1.2.2: a delta-seconds too large is 2147483648; anything else that is not digits is invalid
    assert hc.delta_seconds("60") == 60
    assert hc.delta_seconds("99999999999999999999") == hc.DELTA_MAX
    for bad in ("-1", "1.5", "", "abc", None, "\u0661"):
        assert hc.delta_seconds(bad) is None


def test_http_date_reads_all_three_forms():
    # RFC 9110 §5.6.7: recipients MUST accept all three HTTP-date formats
    want = 784111777.0
    assert hc.http_date("Sun, 06 Nov 1994 08:49:37 GMT") == want
    assert hc.http_date("Sunday, 06-Nov-94 08:49:37 GMT") == want
    assert hc.http_date("Sun Nov  6 08:49:37 1994") == want
    assert hc.http_date("SUN, 06 nov 1994 08:49:37 gmt") == want      # names in any case
    for bad in ("0", "-1", "yesterday", "Sun, 06 Nov 1994 25:49:37 GMT", "", None,
                "Sun, 06 Nov 1994 8:49:37 GMT",         # one-digit hour
                "Sun, 06-Nov-1994 08:49:37 GMT",        # dashes in an IMF-fixdate
                "Sun, 06 Nov  1994 08:49:37 GMT",       # two spaces
                "Sun 06 Nov 1994 08:49:37 GMT"):        # no comma
        assert hc.http_date(bad) is None, bad
    assert hc.http_date(hc.format_date(NOW)) == NOW


def test_fields_joins_repeated_lines():
    # RFC 9110 §5.3: field lines of one name combine in order with ", "
    assert hc.fields([("Cache-Control", "public"), ("cache-control", "max-age=5")]) == {
        "cache-control": "public, max-age=5"}


# ---- storing (RFC 9111 §3) ---------------------------------------------------------------------

def test_no_store_is_never_stored():
    # §5.2.2.5: "a cache MUST NOT store any part of either the immediate request or the response"
    assert ok(cache_control="no-store, max-age=60") == hc.Decision(False, "no-store")
    assert ok(req={"cache-control": "no-store"}, cache_control="max-age=60").reason == "request no-store"


def test_private_without_names_is_not_stored_and_with_names_drops_them():
    # §5.2.2.7: "a shared cache MUST NOT store the response"; the qualified form: "MUST NOT store the specified field names"
    assert ok(cache_control="private, max-age=60").reason == "private"
    resp = {"cache-control": 'private="set-cookie", max-age=60', "set-cookie": "a=1", "etag": '"x"'}
    assert hc.storable("GET", 200, {}, resp).ok
    assert hc.stored_fields(resp) == {"cache-control": 'private="set-cookie", max-age=60', "etag": '"x"'}


def test_authorization_needs_public_s_maxage_or_must_revalidate():
    # §3.5: a shared cache MUST NOT use a response to a request with Authorization unless must-revalidate, public or s-maxage
    auth = {"authorization": "Basic eDp5"}
    assert ok(req=auth, cache_control="max-age=60").reason == "authorization"
    for cc in ("public", "s-maxage=60", "must-revalidate, max-age=60"):
        assert ok(req=auth, cache_control=cc).ok, cc


def test_status_codes():
    # §3: the status is final; 206/304 need understanding (ranges are not stored); heuristics only for
    # heuristically cacheable codes (RFC 9110 §15.1) unless explicit freshness is given
    assert not ok(status=100, cache_control="max-age=60").ok
    assert ok(status=304, cache_control="max-age=60").reason == "status"
    assert ok(status=206, cache_control="max-age=60").reason == "status"
    assert ok(status=200).ok and ok(status=404).ok and ok(status=301).ok
    assert ok(status=302).reason == "no freshness"
    assert ok(status=500).reason == "no freshness"
    assert ok(status=302, cache_control="max-age=60").ok
    assert ok(status=500, expires=DATE).ok
    assert ok(status=299, cache_control="public").ok


def test_must_understand_overrides_no_store_only_for_understood_codes():
    # §5.2.2.3: a cache that understands the status code ignores no-store alongside must-understand
    assert ok(cache_control="must-understand, no-store, max-age=60").ok
    assert ok(status=299, cache_control="must-understand, no-store, max-age=60").reason == "must-understand"


def test_unsafe_methods_and_vary_star_are_not_stored():
    # §3: "the request method is understood by the cache"; §4.1: Vary "*" always fails to match
    assert hc.storable("POST", 200, {}, {"cache-control": "max-age=60"}).reason == "method"
    assert ok(cache_control="max-age=60", vary="Accept, *").reason == "vary *"


def test_cdn_cache_control_comes_before_cache_control():
    # RFC 9213 §2.1: a cache that obeys CDN-Cache-Control ignores Cache-Control when it holds valid directives
    resp = {"cdn-cache-control": "max-age=600", "cache-control": "no-store"}
    assert hc.storable("GET", 200, {}, resp).ok
    assert hc.freshness_lifetime(200, resp, NOW, 3600) == hc.Freshness(600, "max-age")
    assert hc.storable("GET", 200, {}, {"cdn-cache-control": "no-store", "cache-control": "max-age=60"}).reason \
        == "no-store"
    # an empty CDN-Cache-Control, or one that is not a valid Structured Field Dictionary (RFC 9213 §2.1),
    # leaves Cache-Control in charge
    for bad in ("", "max-age=10000, &&&&&", 'max-age="10000"', "Max-Age=5"):
        assert hc.response_directives({"cdn-cache-control": bad, "cache-control": "max-age=5"}) == {"max-age": "5"}
    assert hc.response_directives({"cdn-cache-control": 'no-store, x="y", private'}) == {
        "no-store": None, "x": '"y"', "private": None}


def test_stored_fields_drop_hop_by_hop_and_what_connection_names():
    # §3.1: hop-by-hop fields and those Connection names are not stored
    resp = {"connection": "x-hop", "x-hop": "1", "keep-alive": "t=5", "transfer-encoding": "chunked", "etag": '"e"'}
    assert hc.stored_fields(resp) == {"etag": '"e"'}


# ---- freshness (RFC 9111 §4.2.1, §4.2.2) ------------------------------------------------------

@pytest.mark.parametrize("resp,want", [
    ({"cache-control": "s-maxage=10, max-age=99"}, (10, "s-maxage")),
    ({"cache-control": "max-age=99", "expires": hc.format_date(NOW + 5), "date": DATE}, (99, "max-age")),
    ({"expires": hc.format_date(NOW + 50), "date": hc.format_date(NOW - 10)}, (60, "expires")),
    ({"expires": hc.format_date(NOW + 50)}, (50, "expires")),      # no Date: the time received
    ({"expires": "0", "date": DATE}, (0, "expires")),               # invalid Expires: already expired
    ({"cache-control": "max-age=-1"}, (0, "max-age")),               # invalid max-age: stale
    ({"cache-control": "max-age=1.5"}, (0, "max-age")),
    ({}, (0, "none")),
])
def test_freshness_lifetime_order(resp, want):
    # §4.2.1: s-maxage, then max-age, then Expires minus Date; §5.3: an invalid Expires means already expired
    assert hc.freshness_lifetime(200, resp, NOW, 3600) == hc.Freshness(*want)


def test_heuristic_freshness_only_where_allowed_and_capped_by_the_rule():
    # §4.2.2: heuristics only without explicit expiration, for heuristically cacheable codes or "public";
    # "a typical setting of this fraction might be 10%"
    day = 86400
    resp = {"date": DATE, "last-modified": hc.format_date(NOW - 10 * day)}
    assert hc.freshness_lifetime(200, resp, NOW, 10 * day) == hc.Freshness(day, "heuristic")
    assert hc.freshness_lifetime(200, resp, NOW, 600) == hc.Freshness(600, "heuristic")
    assert hc.freshness_lifetime(302, resp, NOW, 600) == hc.Freshness(0, "none")
    assert hc.freshness_lifetime(302, dict(resp, **{"cache-control": "public"}), NOW, 600).lifetime == 600
    assert hc.freshness_lifetime(200, {"date": DATE}, NOW, 600) == hc.Freshness(0, "none")


# ---- age (RFC 9111 §4.2.3) ---------------------------------------------------------------------

def test_current_age_follows_the_formula():
    # apparent_age = max(0, response_time - date_value); corrected_age_value = age_value + response_delay;
    # corrected_initial_age = max(apparent_age, corrected_age_value); current_age = that + resident_time
    resp = {"date": hc.format_date(NOW - 30), "age": "10"}
    assert hc.current_age(resp, NOW - 2, NOW, NOW + 100) == 130        # apparent age 30 wins
    resp = {"date": DATE, "age": "10"}
    assert hc.current_age(resp, NOW - 2, NOW, NOW + 100) == 112        # Age 10 + delay 2
    assert hc.current_age({"date": hc.format_date(NOW + 60)}, NOW, NOW, NOW) == 0   # a Date ahead: no negative age
    assert hc.current_age({"age": "junk"}, NOW, NOW, NOW + 5) == 5


# ---- reuse and stale answers (RFC 9111 §4.2.4, §5.2; RFC 5861) ------------------------------------

def decide(cc=None, lifetime=60, age=0, req=None, defaults=NONE):
    resp = {"cache-control": cc} if cc else {}
    return hc.reuse(resp, lifetime, age, req or {}, defaults)


def test_fresh_answers_are_served_and_stale_ones_validated():
    assert decide(age=10) == hc.Reuse("fresh", 50)
    assert decide(age=60) == hc.Reuse("validate", 0, "stale")


def test_no_cache_always_validates():
    # §5.2.2.4: "the response MUST NOT be used to satisfy any other request without forwarding it for validation"
    assert decide("no-cache, max-age=60").action == "validate"
    # the qualified form may reuse the answer without the fields it names
    assert decide('no-cache="set-cookie", max-age=60').action == "fresh"
    resp = {"cache-control": 'no-cache="Set-Cookie"', "set-cookie": "a=1", "etag": '"e"'}
    assert hc.unvalidated_fields(resp) == {"cache-control": 'no-cache="Set-Cookie"', "etag": '"e"'}


def test_request_directives():
    # §5.2.1.4 no-cache: do not use a stored response without validation
    assert decide(req={"cache-control": "no-cache"}) == hc.Reuse("validate", 60, "request")
    # §5.2.1.1 max-age: unwilling to accept a response whose age is greater
    assert decide(age=20, req={"cache-control": "max-age=10"}).action == "validate"
    assert decide(age=5, req={"cache-control": "max-age=10"}).action == "fresh"
    # §5.2.1.3 min-fresh: fresh for at least that much longer
    assert decide(age=50, req={"cache-control": "min-fresh=20"}).action == "validate"
    # §5.2.1.2 max-stale: accepts a response exceeding its lifetime by no more than that, or any without a value
    assert decide(age=70, req={"cache-control": "max-stale=20"}).action == "stale"
    assert decide(age=90, req={"cache-control": "max-stale=20"}).action == "validate"
    assert decide(age=9999, req={"cache-control": "max-stale"}).action == "stale"
    # §5.2.1.7 only-if-cached: 504 when nothing usable is stored
    assert decide(age=90, req={"cache-control": "only-if-cached"}).action == "gateway-timeout"
    assert decide(age=9, req={"cache-control": "only-if-cached"}).action == "fresh"


def test_must_revalidate_proxy_revalidate_and_s_maxage_forbid_stale():
    # §5.2.2.2 must-revalidate, §5.2.2.8 proxy-revalidate, §5.2.2.10 s-maxage "implies proxy-revalidate"
    for cc in ("max-age=60, must-revalidate", "max-age=60, proxy-revalidate", "s-maxage=60"):
        assert decide(f"{cc}, stale-while-revalidate=600", age=70).action == "validate", cc
        assert decide(cc, age=70, req={"cache-control": "max-stale"}).action == "validate", cc


def test_stale_while_revalidate_window():
    # RFC 5861 §3: serve stale while revalidating "for up to the indicated number of seconds"
    assert decide("max-age=60, stale-while-revalidate=30", age=80) == hc.Reuse("stale-while-revalidate", -20)
    assert decide("max-age=60, stale-while-revalidate=30", age=95).action == "validate"
    # the rule's default applies only when the answer carries no directive of its own
    rule = hc.StaleDefaults(while_revalidate=100)
    assert decide("max-age=60", age=95, defaults=rule).action == "stale-while-revalidate"
    assert decide("max-age=60, stale-while-revalidate=0", age=95, defaults=rule).action == "validate"


def test_stale_if_error_window():
    # RFC 5861 §4: "when an error is encountered, a cached stale response MAY be used" within the window
    rule = hc.StaleDefaults(if_error=100)
    resp = {"cache-control": "max-age=60, stale-if-error=30"}
    assert hc.stale_if_error(resp, -20, {}, NONE)
    assert not hc.stale_if_error(resp, -40, {}, NONE)
    assert not hc.stale_if_error(resp, -40, {}, rule)                       # the answer's own wins
    assert hc.stale_if_error({"cache-control": "max-age=60"}, -90, {}, rule)  # the rule's default
    assert not hc.stale_if_error({"cache-control": "max-age=60"}, -90, {}, NONE)
    # the request may carry it too (RFC 5861 §4)
    assert hc.stale_if_error({"cache-control": "max-age=60"}, -9, {"cache-control": "stale-if-error=10"}, NONE)
    for cc in ("max-age=60, must-revalidate, stale-if-error=99", "s-maxage=60, stale-if-error=99",
               "no-cache, stale-if-error=99"):
        assert not hc.stale_if_error({"cache-control": cc}, -1, {}, NONE), cc


# ---- Vary (RFC 9111 §4.1) --------------------------------------------------------------------------

def test_secondary_key_from_the_named_request_fields():
    names = hc.vary_names({"vary": "Accept-Encoding, accept-language"})
    assert names == ("accept-encoding", "accept-language")
    a = hc.secondary_key(names, {"accept-encoding": "gzip,  br", "accept-language": "en"})
    b = hc.secondary_key(names, {"accept-encoding": "gzip, br", "accept-language": "en"})
    c = hc.secondary_key(names, {"accept-encoding": "gzip, br", "accept-language": "fr"})
    assert a == b != c                     # whitespace is normalised, values otherwise compared exactly
    # "a header field that is absent from a request can only match another request that also omits it"
    assert hc.secondary_key(("x",), {}) != hc.secondary_key(("x",), {"x": ""})
    assert hc.secondary_key((), {"x": "1"}) == ""
    # Vary "*" always fails to match
    assert hc.vary_names({"vary": "*"}) == ("*",)
    assert hc.secondary_key(("*",), {}) is None


# ---- 304 (RFC 9111 §3.2, §4.3.4) -----------------------------------------------------------------

def test_a_304_refreshes_stored_fields_except_content_length():
    stored = {"etag": '"a"', "content-length": "10", "cache-control": "max-age=10", "x-old": "1", "date": "d1"}
    new = {"etag": '"a"', "content-length": "0", "cache-control": "max-age=99", "x-new": "2", "date": "d2",
           "connection": "close"}
    assert hc.refreshable(stored, new)
    assert hc.refreshed_fields(stored, new) == {
        "etag": '"a"', "content-length": "10", "cache-control": "max-age=99", "x-old": "1", "x-new": "2",
        "date": "d2"}


def test_which_stored_answer_a_304_selects():
    # §4.3.4: a strong validator selects the stored responses with that validator; weak ones match weakly
    assert not hc.refreshable({"etag": '"a"'}, {"etag": '"b"'})
    assert hc.refreshable({"etag": 'W/"a"'}, {"etag": 'W/"a"'})
    assert hc.refreshable({"etag": '"a"'}, {"etag": 'W/"a"'})
    assert not hc.refreshable({"last-modified": "x"}, {"last-modified": "y"})
    assert hc.refreshable({"etag": '"a"'}, {"date": DATE})


def test_conditional_request_uses_the_stored_validators():
    # §4.3.1: If-None-Match from the ETag, If-Modified-Since from Last-Modified
    assert hc.conditional_fields({"etag": '"a"', "last-modified": "Sun, 06 Nov 1994 08:49:37 GMT"}) == {
        "if-none-match": '"a"', "if-modified-since": "Sun, 06 Nov 1994 08:49:37 GMT"}
    assert hc.conditional_fields({}) == {}


# ---- invalidation (RFC 9111 §4.4) ----------------------------------------------------------------

def test_unsafe_methods_invalidate_the_target_and_same_host_locations():
    target = "http://a.test/x/y?q=1"
    resp = {"location": "/z", "content-location": "http://other.test/w"}
    assert hc.invalidation_targets("POST", 201, target, resp) == [target, "http://a.test/z"]
    assert hc.invalidation_targets("PUT", 204, target, {"content-location": "w"}) == [target, "http://a.test/x/w"]
    assert hc.invalidation_targets("DELETE", 302, target, {}) == [target]
    # "MUST invalidate ... when it receives a non-error status code": not after an error
    assert hc.invalidation_targets("POST", 500, target, resp) == []
    assert hc.invalidation_targets("GET", 200, target, resp) == []


# ---- Cache-Status (RFC 9211) ----------------------------------------------------------------------

def test_cache_status_members():
    assert hc.cache_status(hit=True, ttl=41.7) == "contentnode; hit; ttl=41"
    assert hc.cache_status(fwd="uri-miss", fwd_status=200, stored=True, ttl=60) == \
        "contentnode; fwd=uri-miss; fwd-status=200; stored; ttl=60"
    assert hc.cache_status(fwd="stale", fwd_status=304, ttl=-3.5) == "contentnode; fwd=stale; fwd-status=304; ttl=-4"
    assert hc.cache_status(fwd="bypass", detail='no-store "x"') == 'contentnode; fwd=bypass; detail="no-store \\"x\\""'
