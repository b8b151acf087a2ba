"""The wire rules of docs/API.md, "Conventions", each error code, and "a refused request changes nothing"."""

import hashlib
import http.client
import json
import os
import socket

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER

pytestmark = pytest.mark.in_process  # HTTP to the App only: no process needed


def state_digest(node):
    with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def raw_request(port, data: bytes, read_timeout=5.0) -> bytes:
    """Send raw bytes, read until the server closes or a full response arrives."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
            blob = b"".join(chunks)
            head, sep, body = blob.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
        return b"".join(chunks)


def error_of(resp):
    body = resp.json
    assert set(body) == {"error"}, body
    assert set(body["error"]) <= {"code", "message", "field"}
    assert body["error"]["message"]
    return body["error"]["code"]


def test_unknown_path_is_404_json(admin):
    r = admin.get("/api/nothing-here")
    assert r.status == 404 and error_of(r) == "not_found"
    assert r.headers["content-type"] == "application/json"


def test_wrong_method_is_405_with_allow(admin):
    r = admin.delete("/api/session")
    assert r.status == 405 and error_of(r) == "method_not_allowed"
    assert r.headers["allow"] == "GET"
    r = admin.request("PATCH", "/api/login")
    assert r.status == 405 and "POST" in r.headers["allow"]


@pytest.mark.parametrize("host", ["evil.example", "evil.example:9090", "127.0.0.2", "10.0.0.1:80"])
def test_foreign_host_refused(admin, host):
    r = admin.get("/api/me", headers={"Host": host})
    assert r.status == 403 and error_of(r) == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost", "localhost:9090", "127.0.0.1", "127.0.0.1:1234", "[::1]", "[::1]:9090"])
def test_loopback_hosts_allowed(admin, host):
    assert admin.get("/api/me", headers={"Host": host}).status == 200


def test_cross_origin_refused_on_writes_only(node, admin):
    before = state_digest(node)
    r = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "another long passphrase"},
                  headers={"Origin": "http://evil.example"})
    assert r.status == 403 and error_of(r) == "cross_origin"
    assert state_digest(node) == before
    assert admin.get("/api/me", headers={"Origin": "http://evil.example"}).status == 200
    same = admin.post("/api/logout", headers={"Origin": f"http://127.0.0.1:{node.admin_port}"})
    assert same.status == 204


def test_body_over_limit_is_413_without_reading(node, admin):
    before = state_digest(node)
    cookie = "; ".join(f"{k}={v}" for k, v in admin.cookies.items())
    head = (f"PUT /api/me/password HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
            f"Content-Type: application/json\r\nContent-Length: 65537\r\n\r\n").encode()
    reply = raw_request(node.admin_port, head)  # the body is never sent: the answer must come anyway
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b'"payload_too_large"' in reply and b"Connection: close" in reply
    assert state_digest(node) == before


def test_body_at_limit_is_read(admin):
    payload = json.dumps({"username": "x" * (65536 - 40), "password": "y"}).encode()
    payload = payload[:65536]
    r = admin.request("POST", "/api/login", body=payload, headers={"Content-Type": "application/json"})
    assert r.status in (400,) and r.error_code in ("bad_json", "invalid")


def test_chunked_is_411(node, admin):
    cookie = "; ".join(f"{k}={v}" for k, v in admin.cookies.items())
    data = (f"POST /api/logout HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n").encode()
    reply = raw_request(node.admin_port, data)
    assert reply.startswith(b"HTTP/1.1 411 ") and b'"length_required"' in reply
    assert admin.get("/api/me").status == 200  # the logout did not happen


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_non_json_body_is_415(node, admin, content_type):
    before = state_digest(node)
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps({"current_password": ADMIN_PASSWORD, "new_password": "another long passphrase"}).encode()
    r = admin.request("PUT", "/api/me/password", body=body, headers=headers)
    assert r.status == 415 and error_of(r) == "unsupported_media_type"
    assert state_digest(node) == before


def test_non_json_type_with_empty_body_is_415(admin):
    r = admin.request("POST", "/api/logout", body=b"", headers={"Content-Type": "text/plain"})
    assert r.status == 415
    assert admin.get("/api/me").status == 200


def test_json_with_charset_is_accepted(admin):
    r = admin.request("POST", "/api/logout", body=b"{}", headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 204


def test_missing_session_is_401(node):
    r = node.client().get("/api/me")
    assert r.status == 401 and error_of(r) == "unauthenticated"
    r = node.client().get("/api/panel", headers={"Cookie": "cn_session=forged-token-value"})
    assert r.status == 401


def test_bad_json_is_400_after_auth(node, admin):
    before = state_digest(node)
    r = admin.request("PUT", "/api/me/password", body=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400 and error_of(r) == "bad_json"
    # the session check comes first: an anonymous caller with bad JSON gets 401, not 400
    r = node.client().request("PUT", "/api/me/password", body=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 401
    assert state_digest(node) == before


def test_invalid_field_names_the_field(admin):
    r = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "short"})
    assert r.status == 400 and error_of(r) == "invalid" and r.json["error"]["field"] == "new_password"
    r = admin.put("/api/me/password", ["not", "an", "object"])
    assert r.status == 400 and error_of(r) == "invalid"
    r = admin.put("/api/me/password", {"current_password": ADMIN_PASSWORD, "new_password": "x" * 20, "extra": 1})
    assert r.status == 400 and r.json["error"]["field"] == "extra"


def test_check_order_route_before_host_before_size(node):
    # 404 beats a bad Host; a bad Host beats an oversized body; size beats content type
    c = node.client()
    assert c.get("/api/nope", headers={"Host": "evil.example"}).status == 404
    reply = raw_request(node.admin_port, b"POST /api/login HTTP/1.1\r\nHost: evil.example\r\n"
                                         b"Content-Length: 99999999\r\nContent-Type: text/plain\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 403 ") and b"host_not_allowed" in reply
    reply = raw_request(node.admin_port, b"POST /api/login HTTP/1.1\r\nHost: localhost\r\n"
                                         b"Content-Length: 99999999\r\nContent-Type: text/plain\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 ")


def test_expect_continue_only_after_checks(node, admin):
    # refused: no 100 Continue is ever sent, the final answer comes at once
    reply = raw_request(node.admin_port, b"POST /api/login HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
                                         b"Content-Type: text/plain\r\nContent-Length: 10\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 415 ") and b"100 Continue" not in reply
    # accepted: 100 Continue, then the body is read and answered
    body = json.dumps({"username": ADMIN_USER, "password": ADMIN_PASSWORD}).encode()
    with socket.create_connection(("127.0.0.1", node.admin_port), timeout=10) as sock:
        sock.sendall(b"POST /api/login HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        interim = sock.recv(100)
        assert interim.startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        final = b""
        while b'"user"' not in final:
            chunk = sock.recv(65536)
            assert chunk
            final += chunk
        assert b"200 OK" in final


def test_keep_alive_and_content_length(node):
    conn = http.client.HTTPConnection("127.0.0.1", node.admin_port, timeout=5)
    for _ in range(3):
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and resp.version == 11
        assert int(resp.getheader("Content-Length")) == len(body)
        assert resp.getheader("Connection") != "close"
    conn.request("GET", "/nope")
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 404
    conn.request("GET", "/healthz")  # the same connection still serves after an error
    assert conn.getresponse().status == 200
    conn.close()


def test_server_header_hides_python(node):
    r = node.client().get("/healthz")
    assert r.headers["server"] == "contentnode"
    assert "python" not in json.dumps(r.headers).lower()


def test_malformed_request_line_is_json_400(node):
    reply = raw_request(node.admin_port, b"GARBAGE\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ") and b'"error"' in reply


def test_content_length_malformed_is_400(node):
    reply = raw_request(node.admin_port, b"POST /api/login HTTP/1.1\r\nHost: localhost\r\n"
                                         b"Content-Type: application/json\r\nContent-Length: abc\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400 ")


def test_handler_crash_is_500_without_traceback(node, admin):
    # a user record damaged on disk makes the /api/me handler raise
    node.stop()
    path = os.path.join(node.data_dir, "state.json")
    with open(path) as f:
        doc = json.load(f)
    for user in doc["users"].values():
        user["created_at"] = "not a number"
    with open(path, "w") as f:
        json.dump(doc, f)
    node.start()
    r = admin.get("/api/me")
    assert r.status == 500 and error_of(r) == "internal"
    assert b"Traceback" not in r.body and b"not a number" not in r.body
    assert node.log().count("handler failed: GET /api/me") == 1


def test_json_body_survives_text_that_is_not_unicode():
    """An error message quoting a lone surrogate from a request must still be sent."""
    from contentnode.http.response import json_body
    assert json.loads(json_body({"message": "bad field '\ud800'"})) == {"message": "bad field '\ud800'"}
    assert json_body({"m": "é"}) == '{"m":"é"}\n'.encode()


@pytest.mark.parametrize("body", [b"[" * 30000 + b"]" * 30000, b'{"a": NaN}', b'{"a": Infinity}',
                                  b'{"\\ud800": 1}', b'{"password": "\\udfff"}'],
                         ids=["deep", "nan", "infinity", "surrogate-key", "surrogate-value"])
def test_hostile_json_is_bad_json(node, admin, body):
    before = state_digest(node)
    r = admin.request("PUT", "/api/me/password", body=body, headers={"Content-Type": "application/json"})
    assert r.status == 400 and error_of(r) == "bad_json"
    assert state_digest(node) == before


@pytest.mark.parametrize("port", ["admin", "public"])
def test_non_ascii_content_length_is_a_clean_answer(node, port):
    """A digit that is not ASCII ('²') is not a length: a JSON 400 on both ports (RFC 9112 §6.3), then close."""
    number = node.admin_port if port == "admin" else node.public_port
    reply = raw_request(number, "POST /api/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                                "Content-Length: \u00b2\r\n\r\n".encode("latin-1"))
    assert reply.startswith(b"HTTP/1.1 400 ") and b'"error"' in reply and b"Connection: close" in reply


def test_outbound_never_reaches_the_admin_port_even_when_chosen_by_the_os(node, admin):
    """The nodes in tests listen on --admin-port 0: the guard must use the port actually bound."""
    url = f"http://127.0.0.1:{node.admin_port}/healthz"
    assert admin.put("/api/updates", {"url": url}).status == 200
    r = admin.post("/api/update/check")
    assert r.status >= 400 and "admin port" in r.json["error"]["message"]
