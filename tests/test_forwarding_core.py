"""The fields the node forwards to an http origin and passes back (RFC 9110 §7.6)."""

from contentnode.core.forwarding import VIA, end_to_end, request_fields, response_fields


def test_hop_by_hop_fields_and_those_connection_names_are_dropped():
    pairs = [("Connection", "keep-alive, X-Hop"), ("X-Hop", "1"), ("Keep-Alive", "timeout=5"), ("TE", "trailers"),
             ("Upgrade", "h2c"), ("Proxy-Authorization", "Basic x"), ("Trailer", "X"), ("Accept", "*/*")]
    assert end_to_end(pairs) == [("Accept", "*/*")]


def test_an_untrusted_clients_forwarded_fields_are_replaced():
    pairs = [("Host", "site.test"), ("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "gopher"),
             ("X-Forwarded-Host", "evil.test"), ("Content-Length", "3"), ("Cookie", "a=1")]
    assert request_fields(pairs, "192.0.2.7", False, "https", "site.test") == [
        ("Cookie", "a=1"), ("X-Forwarded-For", "192.0.2.7"), ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "site.test"), ("Via", VIA)]


def test_a_trusted_proxys_chain_is_kept_and_the_peer_appended():
    pairs = [("X-Forwarded-For", "198.51.100.1"), ("x-forwarded-proto", "https"), ("Via", "1.1 edge")]
    out = dict(request_fields(pairs, "10.0.0.2", True, "http", "site.test", drop={"cookie"}))
    assert out["X-Forwarded-For"] == "198.51.100.1, 10.0.0.2"
    assert out["X-Forwarded-Proto"] == "https" and out["X-Forwarded-Host"] == "site.test"
    assert out["Via"] == "1.1 edge, " + VIA


def test_answer_fields_lose_framing_and_the_origins_server_and_gain_via():
    pairs = [("Content-Length", "5"), ("Transfer-Encoding", "chunked"), ("ETag", '"e"'), ("Via", "1.0 app"),
             ("server", "SimpleHTTP/0.6 Python/3.11.7")]
    assert response_fields(pairs) == [("ETag", '"e"'), ("Via", "1.0 app, " + VIA)]
