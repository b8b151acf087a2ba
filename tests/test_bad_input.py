"""Every bad input gets a clear JSON error and changes nothing (docs/API.md, "Conventions"), also the odd
ones: digits that are not ASCII, floats where integers belong, lone surrogates, and
what a remote peer answers (a verification page, a certificate)."""

import datetime
import json
import os
import socket
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtensionOID, NameOID
import pytest

from tests.accounts import audit_lines, code, mid_step_offset
from tests.certgen import cert_pem, key_pem, new_key
from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed


def _raw_post(client, path, raw: bytes):
    return client.request("POST", path, body=raw, headers={"Content-Type": "application/json"})


def test_audit_paging_refuses_digits_that_are_not_ascii(admin):
    for value in ("%C2%B2", "%D9%A3"):  # "²" and Arabic-Indic three: str.isdigit() says yes
        response = admin.get(f"/api/audit?limit={value}")
        assert response.status == 400 and response.json["error"]["field"] == "limit", response.body
        assert admin.get(f"/api/audit?cursor={value}").status == 400


def test_totp_codes_in_other_digits_are_wrong_codes_not_errors(node, admin):
    offset = mid_step_offset(node)
    secret = admin.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD}).json["secret"]
    refused = admin.post("/api/me/2fa/enable", {"code": "\u0661\u0662\u0663\u0664\u0665\u0666"})
    assert refused.status == 400 and refused.json["error"]["field"] == "code", refused.body
    assert admin.post("/api/me/2fa/enable", {"code": code(secret, offset)}).status == 200
    client = node.client()
    assert client.login(ADMIN_USER, ADMIN_PASSWORD).json == {"two_factor_required": True, "two_factor_methods": ["totp"]}
    wrong = client.post("/api/login/2fa", {"code": "\u0661\u0662\u0663\u0664\u0665\u0666"})
    assert wrong.status == 401 and wrong.error_code == "bad_credentials", wrong.body
    assert client.post("/api/login/2fa", {"code": code(secret, offset, 1)}).status == 200


def test_redirect_code_must_be_an_integer_not_a_float_or_boolean(node, admin):
    assert admin.post("/api/domains", {"host": "a.example.com"}).status == 201
    for bad in (301.0, True, "301"):
        response = admin.post("/api/domains/redirect", {"host": "a.example.com", "to": "https://b.example.com/",
                                                        "code": bad})
        assert response.status == 400 and response.json["error"]["field"] == "code", (bad, response.body)
    assert admin.get("/api/domains/a.example.com").json["redirect"] is None
    ok = admin.post("/api/domains/redirect", {"host": "a.example.com", "to": "https://b.example.com/", "code": 302})
    assert ok.status == 200 and ok.json["redirect"]["code"] == 302
    answer = node.client("public", host="a.example.com").get("/x")
    assert answer.status == 302 and answer.headers["location"] == "https://b.example.com/x"


def test_a_lone_surrogate_username_is_a_clear_400(node, admin):
    response = _raw_post(node.client(), "/api/login", b'{"username": "ad\\ud800min", "password": "whatever"}')
    assert response.status == 400 and response.json["error"]["field"] == "username", response.body
    assert admin.get("/api/audit").status == 200


def test_lone_surrogates_in_text_fields_are_refused(node, admin):
    before = admin.get("/api/settings").json
    response = admin.request("PUT", "/api/settings", body=b'{"node_name": "edge\\udc00"}',
                             headers={"Content-Type": "application/json"})
    assert response.status == 400 and response.json["error"]["field"] == "node_name", response.body
    bucket = (b'{"name": "b\\ud800", "endpoint": "http://127.0.0.1:9", "region": "us-east-1", '
              b'"bucket": "media", "access_key": "AKID", "secret_key": "secret"}')
    response = _raw_post(admin, "/api/buckets", bucket)
    assert response.status == 400 and response.json["error"]["field"] == "name", response.body
    assert admin.get("/api/settings").json == before and admin.get("/api/buckets").json["buckets"] == []


class _FakeCheckPage(BaseHTTPRequestHandler):
    """A verification page of some other server: it echoes the nonce with a non-ASCII proof."""

    def do_GET(self):
        nonce = self.path.partition("nonce=")[2]
        body = json.dumps({"node": "elsewhere", "nonce": nonce, "proof": "\u00e9" * 64}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_non_ascii_proof_fails_the_domain_check_cleanly(admin):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeCheckPage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert admin.put("/api/settings", {"public_port": server.server_address[1]}).status == 200
        assert admin.post("/api/domains", {"host": "localhost"}).status == 201
        response = admin.post("/api/domains/check", {"host": "localhost"})
        assert response.status == 200, response.body
        assert response.json["ok"] is False and response.json["steps"][-1]["name"] == "proof"
    finally:
        server.shutdown()
        server.server_close()


def _cert_with_a_broken_san(host):
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            # a subjectAltName holding an ediPartyName: OpenSSL serves it, cryptography cannot read it
            .add_extension(x509.UnrecognizedExtension(ExtensionOID.SUBJECT_ALTERNATIVE_NAME,
                                                      bytes.fromhex("3007A505A1030C0178")), critical=False)
            .sign(key, hashes.SHA256()))
    return cert_pem(cert), key_pem(key)


def test_a_certificate_with_unreadable_extensions_is_refused_on_upload(admin):
    assert admin.post("/api/domains", {"host": "a.example.com"}).status == 201
    cert, key = _cert_with_a_broken_san("a.example.com")
    response = admin.post("/api/certs/upload", {"host": "a.example.com", "cert_pem": cert, "key_pem": key})
    assert response.status == 400 and response.json["error"]["field"] == "cert_pem", response.body
    assert admin.get("/api/domains/a.example.com").json["certificate"] is None


def test_domain_test_reports_an_unreadable_server_certificate(admin):
    cert, key = _cert_with_a_broken_san("localhost")
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "bundle.pem"), "w") as f:
        f.write(key + cert)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(folder, "bundle.pem"))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        assert admin.put("/api/settings", {"public_scheme": "https",
                                           "public_port": listener.getsockname()[1]}).status == 200
        assert admin.post("/api/domains", {"host": "localhost"}).status == 201
        response = admin.post("/api/domains/test", {"host": "localhost"})
        assert response.status == 200, response.body
        assert response.json.get("status") == 200, response.body
        assert "cannot be read" in response.json["certificate"]["error"]
    finally:
        listener.close()


def test_image_parameters_in_other_digits_are_a_400(node, admin):
    assert admin.post("/api/domains", {"host": "img.example.com"}).status == 201
    bucket = admin.post("/api/buckets", {"name": "b", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                                         "bucket": "media", "access_key": "AKID", "secret_key": "secret"})
    assert bucket.status == 201
    rule = admin.post("/api/rules", {"domain": "img.example.com", "path": "/", "bucket": bucket.json["id"],
                                     "images": True})
    assert rule.status == 201, rule.body
    response = node.client("public", host="img.example.com").get("/a.png?w=%C2%B2")
    assert response.status == 400 and response.json["error"]["field"] == "w", response.body


def test_passwords_with_lone_surrogates_are_refused_never_a_500(node, admin):
    raw = b'{"username": "admin", "password": "pass\\ud800word"}'
    for _ in range(2):  # malformed input, refused before any password is checked
        answer = _raw_post(node.client(), "/api/login", raw)
        assert answer.status == 400 and answer.error_code == "bad_json", answer.body
        assert answer.json["error"]["field"] == "password"
    answer = _raw_post(admin, "/api/me/2fa/setup", b'{"password": "\\ud800"}')
    assert answer.status == 400 and answer.json["error"]["field"] == "password", answer.body
    answer = _raw_post(admin, "/api/users", b'{"username": "carol", "role": "viewer", '
                                            b'"password": "a long enough pass\\udfffphrase"}')
    assert answer.status == 400 and answer.json["error"]["field"] == "password", answer.body
    assert not [e for e in audit_lines(node) if e["action"] == "login.failure"]  # no password was tried


def test_lone_surrogates_in_rules_and_passphrases_are_refused(admin):
    assert admin.post("/api/domains", {"host": "a.example.com"}).status == 201
    bucket = admin.post("/api/buckets", {"name": "b", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
                                         "bucket": "media", "access_key": "AKID", "secret_key": "secret"}).json
    for field, raw in (("prefix", b'"path": "/x", "prefix": "a\\ud800/"'), ("path", b'"path": "/x\\ud800"')):
        body = b'{"domain": "a.example.com", "bucket": "' + bucket["id"].encode() + b'", ' + raw + b"}"
        answer = _raw_post(admin, "/api/rules", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field, answer.body
    assert admin.get("/api/rules").json["rules"] == []
    answer = _raw_post(admin, "/api/backup/export", b'{"passphrase": "long enough \\ud800 passphrase"}')
    assert answer.status == 400 and answer.json["error"]["field"] == "passphrase", answer.body
    plain = admin.post("/api/backup/export", {}).json
    plain["data"]["settings"] = {"node_name": "PLACEHOLDER"}
    raw = json.dumps({"backup": plain}).replace("PLACEHOLDER", "edge\\udc00").encode()
    answer = _raw_post(admin, "/api/backup/restore", raw)
    assert answer.status == 400 and answer.json["error"]["field"] == "backup", answer.body


def test_a_lone_surrogate_in_a_key_or_a_url_still_gets_an_answer(admin):
    """An error naming such a key used to fail while being written: no answer at all."""
    for method, path in (("POST", "/api/users"), ("PUT", "/api/settings"), ("PUT", "/api/notifications"),
                         ("PUT", "/api/updates"), ("PUT", "/api/policy")):
        answer = admin.request(method, path, body=b'{"\\ud800": 1}', headers={"Content-Type": "application/json"})
        assert answer.status == 400 and answer.json["error"]["field"] == "\\ud800", (path, answer.body)
    for path in ("/api/probe", "/api/diagnose"):
        answer = _raw_post(admin, path, b'{"url": "http://a.example.com/x/\\ud800"}')
        assert answer.status in (200, 400, 404) and answer.json is not None, (path, answer.body)
        assert answer.status in (400, 404) or answer.json["ok"] is False
