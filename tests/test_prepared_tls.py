"""Prepared answers over the HTTPS listener: its requests are given again as plain HTTP's are
(the listener's dispatcher adds HSTS, so it has to hand `again` on), the answers given again are
the pipeline's, HSTS included, and turning HSTS off is seen by the very next answer."""

import socket
import ssl

import pytest

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.test_prepared_hits import HOST, Site, field, shape

pytestmark = pytest.mark.daemon_process


class TlsSite(Site):
    """test_prepared_hits' site, asked over its HTTPS listener (HSTS on)."""

    def __init__(self, workdir: str):
        self.tls_port = None
        super().__init__(workdir)

    def connect(self) -> socket.socket:
        if self.tls_port is None:
            ca_cert, ca_key = make_ca()
            cert, key = make_leaf([HOST], ca_cert, ca_key)
            answer = self.admin.post("/api/certs/upload", {"host": HOST, "cert_pem": cert_pem(cert) + cert_pem(ca_cert),
                                                          "key_pem": key_pem(key)})
            assert answer.status == 200, answer.body
            answer = self.admin.put("/api/https", {"enabled": True, "port": 0, "hsts": True})
            assert answer.status == 200, answer.body
            self.tls_port, self.cadata = answer.json["listening_port"], cert_pem(ca_cert)
        context = ssl.create_default_context(cadata=self.cadata)
        return context.wrap_socket(socket.create_connection(("127.0.0.1", self.tls_port), timeout=10),
                                   server_hostname=HOST)


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory):
    instance = TlsSite(str(tmp_path_factory.mktemp("prepared-tls")))
    yield instance
    instance.close()


@pytest.mark.parametrize("fields", [[], [("Accept-Encoding", "gzip")]], ids=["identity", "gzip"])
def test_https_answers_are_given_again_with_hsts(tls_site, fields):
    tls_site.warm("/page.html", fields)
    reference = tls_site.ask("/page.html", fields, probe=True)
    assert field(reference, "Strict-Transport-Security") and field(reference, "X-Cache") == "HIT"
    before = tls_site.again()
    answers = [tls_site.ask("/page.html", fields) for _ in range(6)]
    given = tls_site.again() - before
    assert given >= 3, f"only {given} of 6 HTTPS answers were given again"
    for answer in answers:
        assert shape(answer) == shape(reference)


def test_hsts_turned_off_is_seen_at_once(tls_site):
    tls_site.warm("/other.html")
    for _ in range(3):
        assert field(tls_site.ask("/other.html"), "Strict-Transport-Security")
    assert tls_site.admin.put("/api/https", {"hsts": False}).status == 200
    assert field(tls_site.ask("/other.html"), "Strict-Transport-Security") is None
