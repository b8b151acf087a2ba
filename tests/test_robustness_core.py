"""Core modules facing odd input: an ACME server answering the wrong shapes, the audit
log given text no UTF-8 file can hold, an audit log whose last line was torn by a crash."""

import json
import os

import pytest

from contentnode.clock import Clock
from contentnode.core import acme, audit, cache, certs, netguard
from contentnode.core.cache_fill import OriginAnswer
from tests.certgen import new_key


class _FakeCa:
    """Answers the ACME client's requests from a script: url -> list of (status, headers, body)."""

    def __init__(self, script):
        self.script = {url: list(answers) for url, answers in script.items()}

    def __call__(self, url, method="GET", headers=None, body=None):
        if not isinstance(url, str):
            netguard.split_url(url)  # what the real fetch does with a URL that is not text
        status, hdrs, payload = self.script[url].pop(0) if len(self.script[url]) > 1 else self.script[url][0]
        hdrs = dict({"replay-nonce": "n0nce"}, **hdrs)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        return netguard.FetchResult(status, "", hdrs, data, 1.0, "127.0.0.1")


def _ca(order_polls, authorizations=()):
    return _FakeCa({
        "https://ca/dir": [(200, {}, {"newNonce": "https://ca/nonce", "newAccount": "https://ca/acct",
                                      "newOrder": "https://ca/order"})],
        "https://ca/nonce": [(200, {}, b"")],
        "https://ca/acct": [(201, {"location": "https://ca/acct/1"}, {"status": "valid"})],
        "https://ca/order": [(201, {"location": "https://ca/order/1"},
                              {"status": "pending", "authorizations": list(authorizations)})],
        "https://ca/order/1": order_polls,
    })


@pytest.mark.parametrize("polls,authorizations", [
    # a Retry-After of digits int() cannot read, then a ready order without its finalize URL
    ([(200, {"retry-after": "\u00b2"}, {"status": "pending"}), (200, {}, {"status": "ready"})], ()),
    # an authorization URL that is not text
    ([(200, {}, {"status": "ready"})], (12345,)),
    # challenges that are not a list of objects
    ([(200, {}, {"status": "invalid", "challenges": 7})], ()),
])
def test_malformed_ca_answers_are_acme_errors(polls, authorizations):
    client = acme.AcmeClient("https://ca/dir", new_key(), _ca(polls, authorizations), sleep=lambda s: None)
    cert_key, _ = certs.new_key_pem()
    with pytest.raises(acme.AcmeError):
        client.issue(["a.example.com"], acme.ChallengeStore(), cert_key)


def test_an_http01_token_that_is_not_base64url_is_refused():
    ca = _ca([(200, {}, {"status": "ready"})], ("https://ca/authz/1",))
    ca.script["https://ca/authz/1"] = [(200, {}, {"status": "pending", "challenges": [
        {"type": "http-01", "token": "t\u00f6ken/../x", "url": "https://ca/chall/1"}]})]
    client = acme.AcmeClient("https://ca/dir", new_key(), ca, sleep=lambda s: None)
    store = acme.ChallengeStore()
    cert_key, _ = certs.new_key_pem()
    with pytest.raises(acme.AcmeError) as err:
        client.issue(["a.example.com"], store, cert_key)
    assert err.value.step == "authorization"
    assert store.get("t\u00f6ken/../x") is None


def test_audit_entries_survive_text_no_utf8_file_can_hold(tmp_path):
    log = audit.AuditLog(str(tmp_path), Clock())
    log.record("login.failure", target="ad\ud800min", ok=False)
    log.record("logout", target="x")
    with open(os.path.join(tmp_path, "audit.jsonl"), "rb") as f:
        lines = [json.loads(line.decode("utf-8")) for line in f]
    assert [e["target"] for e in lines] == ["ad?min", "x"]
    assert audit.verify_chain(str(tmp_path))["ok"] is True


def test_a_torn_last_audit_line_neither_stops_the_log_nor_hides_the_entries(tmp_path):
    log = audit.AuditLog(str(tmp_path), Clock())
    log.record("setup", target="admin")
    log.record("login.success", target="admin")
    path = os.path.join(tmp_path, "audit.jsonl")
    with open(path, "ab") as f:
        f.write(b'{"id":3,"time":"2026-01-0')  # the crash came mid-append: no end, no newline
    reopened = audit.AuditLog(str(tmp_path), Clock())  # a restart after the crash
    entry = reopened.record("logout", target="admin")
    assert entry["id"] == 3
    entries, _ = reopened.query()
    assert [e["action"] for e in entries] == ["logout", "login.success", "setup"]
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    assert json.loads(lines[3])["action"] == "logout"  # on a line of its own
    report = audit.verify_chain(str(tmp_path))
    assert report["ok"] is False and report["line"] == 3  # the torn line is named, not hidden


@pytest.fixture
def short_writes(monkeypatch):
    """os.write writing at most 3 bytes a call, as a full disk or a signal may make it."""
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))


def test_audit_lines_are_whole_even_when_writes_come_up_short(tmp_path, short_writes):
    log = audit.AuditLog(str(tmp_path), Clock())
    log.record("setup", target="admin", detail={"role": "admin"})
    log.record("logout", target="admin")
    assert [e["action"] for e in log.query()[0]] == ["logout", "setup"]
    assert audit.verify_chain(str(tmp_path)) == {"ok": True, "checked": 2}


def test_cache_entries_are_whole_even_when_writes_come_up_short(tmp_path, short_writes):
    body = bytes(range(256)) * 40
    store = cache.Cache(str(tmp_path / "cache"), 1 << 20)
    result = store.get(("example.com", "/a", ""), lambda: OriginAnswer(
        200, {"content_type": "application/octet-stream"}, len(body), [body[:5000], body[5000:]]), 60)
    assert result.read_all() == body
    again = cache.Cache(str(tmp_path / "cache"), 1 << 20).lookup(("example.com", "/a", ""))
    assert again is not None and b"".join(again.chunks()) == body
    again.close()


def test_new_audit_files_and_rotations_sync_their_folder(tmp_path, monkeypatch):
    synced = []
    monkeypatch.setattr(audit, "fsync_dir", lambda path: synced.append(path))
    log = audit.AuditLog(str(tmp_path), Clock(), max_bytes=400)
    log.record("setup", target="admin")
    assert synced == [str(tmp_path)]  # the new file's name
    for _ in range(3):
        log.record("logout", target="admin")
    assert len(synced) >= 3  # each rotation, and the file made after it


def test_cache_entries_reach_the_disk_before_they_become_entries(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    store = cache.Cache(str(tmp_path / "cache"), 1 << 20)
    store.get(("example.com", "/a", ""), lambda: OriginAnswer(200, {}, 3, [b"abc"]), 60).read_all()
    assert events == ["fsync", "replace"]
