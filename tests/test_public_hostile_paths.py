"""Hostile request targets against every stage of the public pipeline, on the real daemon.

One node is set up so that each stage answers something: the verification
page, an ACME challenge path, the HTTPS upgrade (a host with a certificate,
redirect_http on), the admin host (over HTTPS), a domain redirect that keeps
the path, and content. A seeded generator sends each stage hostile targets
(raw control bytes, a bare CR among them; bad percent-encoding; encoded
controls; bytes that are not UTF-8, raw or encoded; overlong paths and
queries): every one must be a 400 JSON error, never a 500, and the log must
hold no failed request. Harmless mutations must never be a 500 either.
"""

import json
import random
import socket
import ssl

import pytest

from tests import certgen
from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

SEED = 2323
PER_STAGE = 120
CONTENT_HOST = "cdn.example.test"
MOVED_HOST = "moved.example.test"
SECURE_HOST = "secure.example.test"
ADMIN_HOST = "admin.example.test"
NONCE = "n" * 24

HOSTILE = [b"\r", b"\t", b"\x00", b"\x01", b"\x1b", b"\x7f", b"%", b"%Z", b"%G1", b"%0", b"%0d", b"%0a",
           b"%00", b"%7f", b"%ff", b"%c3%28", b"%ed%a0%80", b"%e2%82", b"\xff", b"\xc3\x28", b"\xed\xa0\x80",
           b"/" + b"a" * 5000]
HARMLESS = [b"a", b"-", b"_", b"~", b".txt", b"%20", b"%41", b"%c3%a9", "é".encode(), b"/b", b"!", b"$", b"'"]

# stage -> (host, whether over TLS, path prefix, what a clean request answers)
STAGES = {
    "verification": (CONTENT_HOST, False, b"/.well-known/service/check?nonce=" + NONCE.encode(), 200),
    "acme_challenge": (CONTENT_HOST, False, b"/.well-known/acme-challenge/token", 404),
    "https_upgrade": (SECURE_HOST, False, b"/up/file", 301),
    "admin_host": (ADMIN_HOST, True, b"/api/session", 200),
    "domain_redirect": (MOVED_HOST, False, b"/old/file", 301),
    "content": (CONTENT_HOST, False, b"/files/f.txt", 200),
}


@pytest.fixture(scope="module")
def site(tmp_path_factory, seaweed):  # noqa: F811
    instance = Site(str(tmp_path_factory.mktemp("hostile")), seaweed, host=CONTENT_HOST)
    admin = instance.admin
    instance.add_rule("/files", prefix="f/")
    instance.put("f/f.txt", b"hello")
    instance.add_domain(MOVED_HOST)
    assert admin.post("/api/domains/redirect", {"host": MOVED_HOST, "to": "https://new.example/base/"}).status == 200
    ca, ca_key = certgen.make_ca()
    for host in (SECURE_HOST, ADMIN_HOST):
        instance.add_domain(host)
        leaf, key = certgen.make_leaf([host], issuer=ca, issuer_key=ca_key)
        uploaded = admin.post("/api/certs/upload", {"host": host, "cert_pem": certgen.cert_pem(leaf),
                                                    "key_pem": certgen.key_pem(key)})
        assert uploaded.status == 200, uploaded.body
    https = admin.put("/api/https", {"enabled": True, "port": 0, "redirect_http": True})
    assert https.status == 200 and https.json["listening_port"], https.body
    assert admin.put("/api/admin-host", {"host": ADMIN_HOST}).status == 200
    assert admin.put("/api/admin-allow", {"cidrs": ["127.0.0.0/8"]}).status == 200
    instance.https_port = https.json["listening_port"]
    instance.ca_pem = certgen.cert_pem(ca)
    yield instance
    instance.close()


def send(site, stage: str, target: bytes) -> tuple[int, bytes, dict]:
    """(status, body, headers) of one GET of `target`, sent byte for byte to the stage's host."""
    host, tls, _, _ = STAGES[stage]
    sock = socket.create_connection(("127.0.0.1", site.https_port if tls else site.node.public_port), timeout=20)
    if tls:
        sock = ssl.create_default_context(cadata=site.ca_pem).wrap_socket(sock, server_hostname=host)
    with sock:
        sock.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), body, headers


def mutate(rng: random.Random, prefix: bytes, pieces: list) -> bytes:
    """The stage's clean target with one to three pieces put into its path or its query."""
    target = prefix
    for _ in range(rng.randint(1, 3)):
        piece = rng.choice(pieces)
        path, mark, query = target.partition(b"?")
        if mark and rng.random() < 0.4:
            at = rng.randint(0, len(query))
            target = path + b"?" + query[:at] + piece + query[at:]
        else:
            at = rng.randint(1, len(path))
            target = path[:at] + piece + path[at:] + mark + query
    return target


def hostile(target: bytes) -> bool:
    """What must be a 400: a control byte anywhere, a hostile piece in the path, too long."""
    path = target.partition(b"?")[0]
    return (any(byte < 0x20 or byte == 0x7f for byte in target) or any(piece in path for piece in HOSTILE)
            or len(path) > 4096 or len(target) > 8192)


@pytest.mark.parametrize("stage", list(STAGES))
def test_each_stage_answers_hostile_targets_with_400(site, stage):
    host, _, prefix, clean_status = STAGES[stage]
    status, _, headers = send(site, stage, prefix)
    assert status == clean_status, f"the clean target does not reach the {stage} stage"
    if stage == "https_upgrade":
        assert headers["location"].startswith(f"https://{SECURE_HOST}")
    rng = random.Random(f"{SEED}-{stage}")
    for _ in range(PER_STAGE):
        target = mutate(rng, prefix, HOSTILE)
        status, body, _ = send(site, stage, target)
        assert status != 500, f"seed {SEED}: {stage} answered 500 to {target!r}"
        if hostile(target):
            error = json.loads(body)["error"]
            assert (status, error["code"]) == (400, "invalid"), f"seed {SEED}: {stage}, {target!r}: {status} {body!r}"
        harmless = mutate(rng, prefix, HARMLESS)
        status, body, _ = send(site, stage, harmless)
        assert status != 500, f"seed {SEED}: {stage} answered 500 to {harmless!r}"
    log = site.node.log()
    assert "request failed" not in log and "cannot be sent" not in log


def test_redirect_with_a_bare_cr_in_the_path_is_400_not_500(site):
    status, body, headers = send(site, "domain_redirect", b"/a\rSet-Cookie:x=1")
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid"
    assert "set-cookie" not in headers and "location" not in headers


def test_overlong_path_is_400_on_every_stage(site):
    for stage, (_, _, prefix, _) in STAGES.items():
        path, mark, query = prefix.partition(b"?")
        status, body, _ = send(site, stage, path + b"/" + b"a" * 5000 + mark + query)
        assert status == 400 and json.loads(body)["error"]["code"] == "invalid", stage
