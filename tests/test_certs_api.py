"""Certificate upload over the admin API: validation (each bad bundle a 400 that changes
nothing), storage (0600, key never returned) and use by the HTTPS listener."""

import datetime
import os
import ssl

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.certgen import DAY, cert_pem, key_pem, make_ca, make_leaf, new_key
from tests.tlsclient import fetch_over_tls

pytestmark = pytest.mark.in_process  # HTTP to the App; the restart runs a daemon process

HOST = "shop.example.com"


@pytest.fixture(scope="module")
def ca():
    return make_ca()


def _bundle(ca, names=(HOST,), **kw):
    cert, key = make_leaf(list(names), ca[0], ca[1], **kw)
    return cert_pem(cert) + cert_pem(ca[0]), key_pem(key)


@pytest.fixture
def domain(admin):
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    return admin


def _upload(admin, cert_text, key_text, host=HOST):
    return admin.post("/api/certs/upload", {"host": host, "cert_pem": cert_text, "key_pem": key_text})


def test_good_upload(domain, node, ca):
    cert_text, key_text = _bundle(ca, names=(HOST, "*.example.com"))
    response = _upload(domain, cert_text, key_text)
    assert response.status == 200, response.body
    info = response.json
    assert info["host"] == HOST and info["sans"] == [HOST, "*.example.com"]
    assert info["issuer"] == "contentnode test CA" and info["source"] == "upload"
    assert info["not_before"].endswith("Z") and info["not_after"].endswith("Z")
    assert "BEGIN" not in response.body.decode()
    record = domain.get(f"/api/domains/{HOST}").json
    assert record["certificate"]["fingerprint"] == info["fingerprint"]
    stored = os.path.join(node.data_dir, "certs", f"{HOST}.pem")
    assert os.stat(stored).st_mode & 0o777 == 0o600
    assert key_text.strip().splitlines()[1] not in node.log()
    assert "PRIVATE" not in domain.get("/api/panel").body.decode()


def _assert_refused(admin, response, field, fragment):
    assert response.status == 400, response.body
    error = response.json["error"]
    assert error["code"] == "invalid" and error["field"] == field and fragment in error["message"]
    assert admin.get(f"/api/domains/{HOST}").json["certificate"] is None


def test_mismatched_key(domain, ca):
    cert_text, _ = _bundle(ca)
    _assert_refused(domain, _upload(domain, cert_text, key_pem(new_key())), "key_pem", "does not belong")


def test_wrong_name(domain, ca):
    _assert_refused(domain, _upload(domain, *_bundle(ca, names=("other.example.com",))), "cert_pem",
                    "does not cover")


def test_wildcard_does_not_cover_two_labels(domain, ca):
    _assert_refused(domain, _upload(domain, *_bundle(ca, names=("*.com",))), "cert_pem", "does not cover")


def test_expired(domain, ca):
    past = datetime.datetime.now(datetime.timezone.utc) - 60 * DAY
    _assert_refused(domain, _upload(domain, *_bundle(ca, not_before=past, not_after=past + DAY)),
                    "cert_pem", "expired")


def test_expired_by_the_node_clock(domain, node, ca):
    node.set_clock_offset(200 * 86400)  # the leaf is valid for 90 days
    assert domain.login(ADMIN_USER, ADMIN_PASSWORD).status == 200  # the old session timed out
    _assert_refused(domain, _upload(domain, *_bundle(ca)), "cert_pem", "expired")


def test_chain_out_of_order(domain, ca):
    cert, key = make_leaf([HOST], ca[0], ca[1])
    _assert_refused(domain, _upload(domain, cert_pem(ca[0]) + cert_pem(cert), key_pem(key)), "cert_pem",
                    "out of order")


@pytest.mark.parametrize("cert_text, key_text, field", [
    ("garbage", None, "cert_pem"),
    (None, "garbage", "key_pem"),
    ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", None, "cert_pem"),
    (17, None, "cert_pem"),
    (None, "", "key_pem"),
])
def test_garbage(domain, ca, cert_text, key_text, field):
    good_cert, good_key = _bundle(ca)
    response = _upload(domain, good_cert if cert_text is None else cert_text,
                       good_key if key_text is None else key_text)
    assert response.status == 400 and response.json["error"]["field"] == field, response.body
    assert domain.get(f"/api/domains/{HOST}").json["certificate"] is None


def test_upload_for_unknown_domain(admin, ca):
    assert _upload(admin, *_bundle(ca)).status == 404


def test_missing_fields(domain):
    response = domain.post("/api/certs/upload", {"host": HOST})
    assert response.status == 400 and response.json["error"]["field"] in ("cert_pem", "key_pem")


def test_uploaded_certificate_served_and_replaced_live(domain, ca):
    first = _upload(domain, *_bundle(ca)).json
    port = domain.put("/api/https", {"enabled": True, "port": 0}).json["listening_port"]
    root = cert_pem(ca[0])
    assert fetch_over_tls(port, HOST, cadata=root)[0] == first["fingerprint"]
    second = _upload(domain, *_bundle(ca)).json
    assert second["fingerprint"] != first["fingerprint"]
    assert fetch_over_tls(port, HOST, cadata=root)[0] == second["fingerprint"]
    # deleting the domain removes its certificate from the listener
    assert domain.delete(f"/api/domains/{HOST}").status == 204
    with pytest.raises(ssl.SSLError):
        fetch_over_tls(port, HOST, cadata=root)


def _wait_for_log(node, text, seconds=15.0):
    import time
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in node.log():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.daemon_process
def test_expiry_warning_raised_by_the_renewal_job(domain, node, ca):
    assert _upload(domain, *_bundle(ca)).status == 200  # valid for 90 more days
    node.set_clock_offset(80 * 86400)
    node.restart()  # the renewal job makes a first pass at start
    assert _wait_for_log(node, f"event cert_expiring {{'host': '{HOST}', 'days_left': 9"), node.log()[-3000:]
    # an uploaded certificate is never renewed by ACME
    assert "cert_renewal_failed" not in node.log()
