"""Settings core: defaults, overlay and validation of every key."""

import pytest

from contentnode.core import settings as st
from contentnode.core.fields import FieldError


def test_effective_overlays_defaults_without_sharing_them():
    eff = st.effective({"settings": {"node_name": "edge-1", "updates": {"auto_check": True}}})
    assert eff["node_name"] == "edge-1" and eff["log_level"] == "info"
    assert eff["updates"] == {"channel": "stable", "auto_check": True, "url": None}
    eff["trusted_proxies"].append("x")
    assert st.effective({})["trusted_proxies"] == []


def test_validate_normalises():
    out = st.validate({"node_name": "  edge-1 ", "trusted_proxies": ["10.0.0.1/8", "::1", "10.0.0.0/8"],
                       "public_port": None, "acme_email": "ops@example.com", "cache_max_bytes": 0})
    assert out == {"node_name": "edge-1", "trusted_proxies": ["10.0.0.0/8", "::1/128"],
                   "public_port": None, "acme_email": "ops@example.com", "cache_max_bytes": 0}


@pytest.mark.parametrize("body,field", [
    ({"node_name": ""}, "node_name"), ({"node_name": "x" * 65}, "node_name"), ({"node_name": "a\nb"}, "node_name"),
    ({"public_url": "http://node.example/path"}, "public_url"), ({"public_url": "ftp://x"}, "public_url"),
    ({"public_scheme": "gopher"}, "public_scheme"), ({"public_port": 0}, "public_port"),
    ({"public_port": True}, "public_port"), ({"acme_directory": "not a url"}, "acme_directory"),
    ({"acme_directory": "https://u:p@acme.example/dir"}, "acme_directory"),
    ({"acme_email": "nope"}, "acme_email"), ({"cache_max_bytes": -1}, "cache_max_bytes"),
    ({"cache_max_bytes": 1.5}, "cache_max_bytes"), ({"allow_private_outbound": "no"}, "allow_private_outbound"),
    ({"trusted_proxies": "10.0.0.0/8"}, "trusted_proxies"), ({"trusted_proxies": ["10.0.0.0/33"]}, "trusted_proxies"),
    ({"trusted_proxies": ["x"] * 101}, "trusted_proxies"), ({"link_grace_seconds": 31 * 86400}, "link_grace_seconds"),
    ({"log_level": "trace"}, "log_level"), ({"admin_host": "x.example"}, "admin_host"), ({"colour": 1}, "colour"),
])
def test_validate_rejects_with_field(body, field):
    with pytest.raises(FieldError) as err:
        st.validate(body)
    assert err.value.field == field and str(err.value)


def test_hostnames_cidrs_and_membership():
    assert st.hostname("h", "Admin.Example.COM.") == "admin.example.com"
    for bad in ("admin", "-a.example", "a..example", "a_b.example"):
        with pytest.raises(FieldError):
            st.hostname("h", bad)
    assert st.hostname("h", "mail", fqdn=False) == "mail"
    cidrs = st.cidr_list("c", ["192.0.2.0/24", "2001:db8::/32"])
    assert st.address_in("192.0.2.7", cidrs) and st.address_in("::ffff:192.0.2.7", cidrs)
    assert st.address_in("2001:db8::1", cidrs) and not st.address_in("198.51.100.1", cidrs)
    assert not st.address_in("garbage", cidrs)


def test_validate_updates():
    assert st.validate_updates({"channel": "beta", "auto_check": True, "url": None}) == \
        {"channel": "beta", "auto_check": True, "url": None}
    for body, field in [({"channel": "nightly"}, "channel"), ({"auto_check": 1}, "auto_check"),
                        ({"url": "file:///etc/passwd"}, "url"), ({"key": "x"}, "key")]:
        with pytest.raises(FieldError) as err:
            st.validate_updates(body)
        assert err.value.field == field
