"""Host name normalisation."""

import pytest

from contentnode.core.hostnames import HostnameError, host_from_header, normalize_host, unicode_form


@pytest.mark.parametrize("raw, expected", [
    ("Example.COM", "example.com"),
    ("example.com.", "example.com"),
    ("  shop.example.com  ", "shop.example.com"),
    ("localhost", "localhost"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
    ("a-b.c1.example", "a-b.c1.example"),
    ("a" * 63 + ".com", "a" * 63 + ".com"),
])
def test_accepted(raw, expected):
    assert normalize_host(raw) == expected


@pytest.mark.parametrize("raw", [
    "", ".", "a..b", ".example.com", "-bad.example", "bad-.example", "under_score.example",
    "a" * 64 + ".com", ".".join(["abcdefghij"] * 24) + ".example",  # > 253 characters
    "127.0.0.1", "[::1]", "::1", "example.123", "exa mple.com", "example.com:80", "http://example.com",
    "*.example.com", "example.com/path", None, 42, "ex\x00ample.com",
])
def test_refused(raw):
    with pytest.raises(HostnameError):
        normalize_host(raw)


def test_error_message_names_the_problem():
    with pytest.raises(HostnameError, match="63"):
        normalize_host("a" * 64 + ".com")
    with pytest.raises(HostnameError, match="IP address"):
        normalize_host("10.0.0.1")


def test_host_header_forms():
    assert host_from_header("Shop.Example.com:8080") == "shop.example.com"
    assert host_from_header("localhost") == "localhost"
    assert host_from_header("[::1]:80") is None
    assert host_from_header("") is None
    assert host_from_header("bad host") is None


def test_unicode_form_round_trip():
    assert unicode_form(normalize_host("bücher.example")) == "bücher.example"
    assert unicode_form("plain.example") == "plain.example"
