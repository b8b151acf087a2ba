"""Certificate validation, the on-disk store and SNI selection (real TLS handshakes)."""

import datetime
import warnings
import os
import socket
import ssl
import time

import pytest
from cryptography.hazmat.primitives import serialization

from contentnode.core import certs
from tests.certgen import DAY, cert_pem, key_pem, make_ca, make_leaf, new_key
from tests.peers.stub import LoopbackListener


@pytest.fixture(scope="module")
def ca():
    return make_ca()


def _bundle(ca, names, **kw):
    cert, key = make_leaf(names, ca[0], ca[1], **kw)
    return cert_pem(cert) + cert_pem(ca[0]), key_pem(key)


@pytest.mark.parametrize("host, pattern, ok", [
    ("example.com", "example.com", True),
    ("EXAMPLE.com", "example.COM", True),
    ("www.example.com", "*.example.com", True),
    ("example.com", "*.example.com", False),
    ("a.b.example.com", "*.example.com", False),
    ("www.example.com", "w*.example.com", False),
    ("www.example.com", "*.*.com", False),
    ("a.localhost", "*.localhost", True),
    ("example.com", "*", False),
    ("other.com", "example.com", False),
])
def test_name_matching(host, pattern, ok):
    assert certs.name_matches(host, pattern) is ok


def test_good_bundle_and_summary(ca):
    cert_text, key_text = _bundle(ca, ["shop.example.com", "*.cdn.example.com"])
    bundle = certs.validate_bundle("shop.example.com", cert_text, key_text, time.time())
    assert len(bundle.chain) == 2
    info = certs.summary(bundle.leaf, "shop.example.com")
    assert info["sans"] == ["shop.example.com", "*.cdn.example.com"]
    assert info["issuer"] == "contentnode test CA"
    assert info["matches_host"] is True
    assert len(info["fingerprint"]) == 64
    assert info["not_after"].endswith("Z") and info["not_before"] < info["not_after"]
    assert "PRIVATE" not in repr(info)
    # wildcard coverage
    certs.validate_bundle("img.cdn.example.com", cert_text, key_text, time.time())


def test_rsa_key_accepted(ca):
    cert, key = make_leaf(["rsa.example.com"], ca[0], ca[1], key=new_key("rsa"))
    certs.validate_bundle("rsa.example.com", cert_pem(cert), key_pem(key), time.time())


def _refused(field, fragment, host, cert_text, key_text, now=None):
    with pytest.raises(certs.CertError) as caught:
        certs.validate_bundle(host, cert_text, key_text, now or time.time())
    assert caught.value.field == field
    assert fragment in str(caught.value)


def test_mismatched_key(ca):
    cert_text, _ = _bundle(ca, ["a.example.com"])
    _refused("key_pem", "does not belong", "a.example.com", cert_text, key_pem(new_key()))


def test_wrong_name(ca):
    cert_text, key_text = _bundle(ca, ["a.example.com"])
    _refused("cert_pem", "does not cover b.example.com", "b.example.com", cert_text, key_text)


def test_expired_and_not_yet_valid(ca):
    past = datetime.datetime.now(datetime.timezone.utc) - 30 * DAY
    cert_text, key_text = _bundle(ca, ["a.example.com"], not_before=past, not_after=past + DAY)
    _refused("cert_pem", "expired", "a.example.com", cert_text, key_text)
    future = datetime.datetime.now(datetime.timezone.utc) + 30 * DAY
    cert_text, key_text = _bundle(ca, ["a.example.com"], not_before=future, not_after=future + DAY)
    _refused("cert_pem", "not valid before", "a.example.com", cert_text, key_text)


def test_chain_out_of_order(ca):
    cert, key = make_leaf(["a.example.com"], ca[0], ca[1])
    _refused("cert_pem", "out of order", "a.example.com", cert_pem(ca[0]) + cert_pem(cert), key_pem(key))
    other_ca = make_ca("someone else")
    _refused("cert_pem", "out of order", "a.example.com", cert_pem(cert) + cert_pem(other_ca[0]), key_pem(key))


@pytest.mark.parametrize("cert_text, key_text, field", [
    ("garbage", None, "cert_pem"),
    ("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", None, "cert_pem"),
    (None, "garbage", "key_pem"),
    (None, "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "key_pem"),
    (42, None, "cert_pem"),
])
def test_garbage(ca, cert_text, key_text, field):
    good_cert, good_key = _bundle(ca, ["a.example.com"])
    with pytest.raises(certs.CertError) as caught:
        certs.validate_bundle("a.example.com", good_cert if cert_text is None else cert_text,
                              good_key if key_text is None else key_text, time.time())
    assert caught.value.field == field


def test_encrypted_key_refused(ca):
    cert, key = make_leaf(["a.example.com"], ca[0], ca[1])
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"pass")).decode()
    _refused("key_pem", "encrypted", "a.example.com", cert_pem(cert), encrypted)


def test_store_file_is_private_and_stamped(tmp_path, ca):
    store = certs.CertStore(str(tmp_path / "certs"))
    assert os.stat(store.folder).st_mode & 0o777 == 0o700
    assert store.stamp("a.example.com") is None and store.leaf("a.example.com") is None
    bundle = certs.validate_bundle("a.example.com", *_bundle(ca, ["a.example.com"]), time.time())
    store.save("a.example.com", bundle)
    assert os.stat(store.path("a.example.com")).st_mode & 0o777 == 0o600
    first = store.stamp("a.example.com")
    assert store.leaf("a.example.com").serial_number == bundle.leaf.serial_number
    store.save("a.example.com", certs.validate_bundle(
        "a.example.com", *_bundle(ca, ["a.example.com"]), time.time()))
    assert store.stamp("a.example.com") != first
    assert not [n for n in os.listdir(store.folder) if n.endswith(".tmp")]
    store.delete("a.example.com")
    store.delete("a.example.com")
    assert store.stamp("a.example.com") is None


class _TlsServer(LoopbackListener):
    """Accepts TLS connections with the selector's context, one thread per handshake."""

    def __init__(self, context):
        self.context = context
        super().__init__()

    def handle(self, conn):
        try:
            with self.context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"hello")
        except (ssl.SSLError, OSError):
            conn.close()


def _peer_serial(port, host, ca_cert, **kw):
    context = ssl.create_default_context(cadata=cert_pem(ca_cert))
    if kw:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    for name, value in kw.items():
        setattr(context, name, value)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
            assert tls.recv(5) == b"hello"
    from cryptography import x509
    return x509.load_der_x509_certificate(der).serial_number


def test_sni_selection_and_live_replacement(tmp_path, ca):
    store = certs.CertStore(str(tmp_path / "certs"))
    bundles = {h: certs.validate_bundle(h, *_bundle(ca, [h]), time.time()) for h in ("a.example", "b.example")}
    for host, bundle in bundles.items():
        store.save(host, bundle)
    server = _TlsServer(certs.SniSelector(store).server_context())
    try:
        for host, bundle in bundles.items():
            assert _peer_serial(server.port, host, ca[0]) == bundle.leaf.serial_number
        # a replaced certificate is used by the next connection, no restart
        renewed = certs.validate_bundle("a.example", *_bundle(ca, ["a.example"]), time.time())
        store.save("a.example", renewed)
        assert _peer_serial(server.port, "a.example", ca[0]) == renewed.leaf.serial_number
        # an unknown name gets no certificate at all
        with pytest.raises(ssl.SSLError):
            _peer_serial(server.port, "unknown.example", ca[0])
        # TLS 1.1 and older are refused
        with pytest.raises(ssl.SSLError), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            _peer_serial(server.port, "a.example", ca[0], minimum_version=ssl.TLSVersion.TLSv1,
                         maximum_version=ssl.TLSVersion.TLSv1_1)
    finally:
        server.close()


def test_csr_names_hosts():
    key, text = certs.new_key_pem()
    from cryptography import x509
    csr = x509.load_der_x509_csr(certs.make_csr(["a.example", "b.example"], key))
    assert csr.is_signature_valid
    names = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["a.example", "b.example"]
    assert "PRIVATE KEY" in text
