"""PUT /api/https: the TLS listener started, moved and stopped at run time; SNI, TLS 1.2+,
HTTP to HTTPS upgrade, HSTS; bad input refused without change."""

import socket
import ssl
import warnings

import pytest

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.peers.pebble import free_port
from tests.tlsclient import fetch_over_tls

pytestmark = pytest.mark.in_process  # HTTP and HTTPS to the App; the restart runs a daemon process

HOST = "secure.example.com"
NONCE_PATH = "/.well-known/service/check?nonce=" + "n" * 24


@pytest.fixture(scope="module")
def ca():
    return make_ca()


@pytest.fixture
def with_cert(admin, ca):
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    cert, key = make_leaf([HOST], ca[0], ca[1])
    response = admin.post("/api/certs/upload", {"host": HOST, "cert_pem": cert_pem(cert) + cert_pem(ca[0]),
                                                "key_pem": key_pem(key)})
    assert response.status == 200, response.body
    return admin


def test_defaults_and_panel(admin):
    answer = admin.get("/api/https").json
    assert answer == {"enabled": False, "port": 443, "redirect_http": False, "hsts": False,
                      "listening_port": None, "hosts_with_certificates": []}
    assert admin.get("/api/panel").json["https"]["enabled"] is False


@pytest.mark.parametrize("body, field", [
    ({"enabled": "yes"}, "enabled"), ({"port": 70000}, "port"), ({"port": "443"}, "port"),
    ({"hsts": 1}, "hsts"), ({"redirect_http": None, "x": 1}, "x"),
])
def test_bad_input(admin, body, field):
    response = admin.put("/api/https", body)
    assert response.status == 400 and response.json["error"]["field"] == field, response.body
    assert admin.get("/api/https").json["enabled"] is False


def test_ports_in_use_refused(admin, node):
    response = admin.put("/api/https", {"enabled": True, "port": node.public_port})
    assert response.status == 409 and response.error_code == "port_in_use"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        response = admin.put("/api/https", {"enabled": True, "port": busy.getsockname()[1]})
        assert response.status == 409 and response.error_code == "port_in_use"
    finally:
        busy.close()
    answer = admin.get("/api/https").json
    assert answer["enabled"] is False and answer["listening_port"] is None


def test_serve_move_and_stop(with_cert, ca):
    root = cert_pem(ca[0])
    port = free_port()
    answer = with_cert.put("/api/https", {"enabled": True, "port": port}).json
    assert answer["listening_port"] == port and answer["hosts_with_certificates"] == [HOST]
    _, raw = fetch_over_tls(port, HOST, NONCE_PATH, cadata=root)
    assert raw.startswith(b"HTTP/1.1 200") and b"strict-transport-security" not in raw.lower()
    moved = free_port()
    assert with_cert.put("/api/https", {"port": moved}).json["listening_port"] == moved
    with pytest.raises(ConnectionRefusedError):
        fetch_over_tls(port, HOST, cadata=root)
    assert fetch_over_tls(moved, HOST, NONCE_PATH, cadata=root)[1].startswith(b"HTTP/1.1 200")
    assert with_cert.put("/api/https", {"enabled": False}).json["listening_port"] is None
    with pytest.raises(ConnectionRefusedError):
        fetch_over_tls(moved, HOST, cadata=root)


def test_sni_and_protocol_rules(with_cert, ca):
    port = with_cert.put("/api/https", {"enabled": True, "port": 0}).json["listening_port"]
    root = cert_pem(ca[0])
    with pytest.raises(ssl.SSLError):
        fetch_over_tls(port, "unknown.example.com", cadata=root)
    old = ssl.create_default_context(cadata=root)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError):
        fetch_over_tls(port, HOST, context=old)
    # the listener still serves after refused handshakes
    assert fetch_over_tls(port, HOST, NONCE_PATH, cadata=root)[1].startswith(b"HTTP/1.1 200")


def test_upgrade_and_hsts(with_cert, node, ca):
    port = with_cert.put("/api/https", {"enabled": True, "port": 0, "redirect_http": True,
                                        "hsts": True}).json["listening_port"]
    public = node.client("public", host=f"{HOST}:{node.public_port}")
    answer = public.get("/some/file.txt?v=2")
    assert answer.status == 301
    assert answer.headers["location"] == f"https://{HOST}:{port}/some/file.txt?v=2"
    # challenges and the verification page stay on plain HTTP
    assert public.get(NONCE_PATH).status == 200
    assert public.get("/.well-known/acme-challenge/unknown-token").status == 404
    # a host without a certificate is not upgraded
    assert node.client("public", host="plain.example.com").get("/x").status != 301
    _, raw = fetch_over_tls(port, HOST, NONCE_PATH, cadata=cert_pem(ca[0]))
    assert b"strict-transport-security: max-age=31536000" in raw.lower()


@pytest.mark.daemon_process
def test_https_comes_back_after_restart(with_cert, node, ca):
    # free_port() leaves the port unbound until the node binds it: another test's listener may
    # take it first, and then the node logs the bind failure; such a round is tried again
    for _ in range(3):
        port = free_port()
        with_cert.put("/api/https", {"enabled": True, "port": port})
        node.restart()
        if with_cert.get("/api/https").json["listening_port"] == port:
            break
    assert with_cert.get("/api/https").json["listening_port"] == port
    assert fetch_over_tls(port, HOST, NONCE_PATH, cadata=cert_pem(ca[0]))[1].startswith(b"HTTP/1.1 200")
