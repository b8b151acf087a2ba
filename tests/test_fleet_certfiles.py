"""fleet/certfiles: the certificates part checked and installed on a replica's certificate store."""

import pytest

from contentnode.core.certs import CertStore, validate_bundle
from contentnode.fleet import certfiles
from contentnode.fleet.wire import Refused
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf

DOMAINS = {"a.test": {"certificate": {"fingerprint": "x"}}, "b.test": {"certificate": None}}


def _pair(host, key=None):
    ca, ca_key = make_ca()
    cert, leaf_key = make_leaf([host], issuer=ca, issuer_key=ca_key)
    return {"key_pem": key_pem(key or leaf_key), "chain_pem": cert_pem(cert)}


def test_read_takes_only_domains_with_a_certificate(tmp_path):
    store = CertStore(str(tmp_path))
    pair = _pair("a.test")
    store.save("a.test", validate_bundle("a.test", pair["chain_pem"], pair["key_pem"], None))
    store.save("b.test", validate_bundle("b.test", *reversed(list(_pair("b.test").values())), None))
    part = certfiles.read(store, DOMAINS)
    assert list(part) == ["a.test"] and part["a.test"]["chain_pem"].startswith("-----BEGIN CERTIFICATE")


def test_install_writes_changes_skips_the_same_and_prune_drops_the_rest(tmp_path):
    store = CertStore(str(tmp_path))
    stale = _pair("old.test")
    store.save("old.test", validate_bundle("old.test", stale["chain_pem"], stale["key_pem"], None))
    part = {"a.test": _pair("a.test")}
    checked = certfiles.check(part, DOMAINS, store)
    assert certfiles.install(store, checked) == 1   # a written; old kept until the records change
    assert store.hosts() == ["a.test", "old.test"]
    assert certfiles.prune(store, checked) == 1
    assert store.hosts() == ["a.test"]
    again = certfiles.check(certfiles.read(store, DOMAINS), DOMAINS, store)
    assert again == {"a.test": None}  # unchanged: not parsed again
    assert certfiles.install(store, again) == 0 and certfiles.prune(store, again) == 0


@pytest.mark.parametrize("case", ["key_of_another_certificate", "not_a_fleet_domain", "wrong_name",
                                  "not_an_object"])
def test_a_bad_entry_refuses_the_bundle(tmp_path, case):
    store = CertStore(str(tmp_path))
    part = {
        "key_of_another_certificate": {"a.test": dict(_pair("a.test"), key_pem=_pair("a.test")["key_pem"])},
        "not_a_fleet_domain": {"evil.test": _pair("evil.test")},
        "wrong_name": {"a.test": _pair("c.test")},
        "not_an_object": {"a.test": "pem"},
    }[case]
    with pytest.raises(Refused) as refused:
        certfiles.check(part, DOMAINS, store)
    assert refused.value.code in ("restore_checks", "malformed")
    assert store.hosts() == []
