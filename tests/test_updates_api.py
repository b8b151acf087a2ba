"""The update check over HTTP: a good, a tampered and an unsigned manifest
served locally, the outbound policy, and the daily job raising
update_available."""

import pytest

from contentnode import __version__
from contentnode.core.updates import parse_version
from tests.inprocess import node_class
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.peers.telegram import FakeTelegram
from tests.peers.update_server import UpdateServer, new_key, payload, sign_manifest, tamper, unsigned

pytestmark = pytest.mark.in_process  # HTTP to the App and a local update server: no process needed

NEWER = "99.1.0"
TOKEN = "4242:" + "T" * 35


@pytest.fixture
def release_key():
    return new_key()


@pytest.fixture
def served(release_key):
    key, _ = release_key
    good = sign_manifest(payload({"stable": {"version": NEWER, "notes": "Big one."},
                                  "beta": {"version": __version__, "notes": ""}}), key)
    with UpdateServer() as server:
        server.files = {"/good.json": (200, good), "/tampered.json": (200, tamper(good)),
                        "/unsigned.json": (200, unsigned(payload({"stable": {"version": NEWER}})))}
        yield server


@pytest.fixture
def keyed(request, tmp_path, release_key):
    """A daemon configured with the test release key."""
    _, pem = release_key
    b64 = "".join(pem.strip().splitlines()[1:-1])
    instance = node_class(request)(str(tmp_path), env={"CONTENTNODE_UPDATE_PUBLIC_KEY": b64}).start()
    client = instance.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    instance.admin = client
    yield instance
    instance.close()


def test_check_good_manifest(keyed, served):
    c = keyed.admin
    assert c.put("/api/updates", {"url": served.url("/good.json")}).json == \
        {"channel": "stable", "auto_check": False, "url": served.url("/good.json")}
    answer = c.post("/api/update/check")
    assert answer.status == 200
    assert answer.json["current"] == __version__ and answer.json["latest"] == NEWER
    assert answer.json["available"] is True and answer.json["notes"] == "Big one."
    assert answer.json["checked_at"].endswith("Z")
    assert parse_version(NEWER) > parse_version(__version__)
    c.put("/api/updates", {"channel": "beta"})
    assert c.post("/api/update/check").json["available"] is False
    panel = c.get("/api/panel").json["updates"]
    assert panel["status"]["latest"] == __version__ and panel["current"] == __version__


@pytest.mark.parametrize("path,message", [
    ("/tampered.json", "signature does not match"),
    ("/unsigned.json", "not signed"),
    ("/missing.json", "HTTP 404"),
])
def test_bad_manifests_are_refused(keyed, served, path, message):
    c = keyed.admin
    c.put("/api/updates", {"url": served.url(path)})
    answer = c.post("/api/update/check")
    assert answer.status == 502 and answer.error_code == "update_check_failed"
    assert message in answer.json["error"]["message"]
    assert c.get("/api/panel").json["updates"]["status"]["error"] == answer.json["error"]["message"]


def test_shipped_key_refuses_a_manifest_signed_by_another_key(admin, served):
    admin.put("/api/updates", {"url": served.url("/good.json")})
    answer = admin.post("/api/update/check")
    assert answer.status == 502 and "signature does not match" in answer.json["error"]["message"]


def test_settings_validation_and_policy(keyed, served):
    c = keyed.admin
    assert c.post("/api/update/check").status == 400  # no URL yet
    for body, field in [({"channel": "nightly"}, "channel"), ({"url": "file:///etc/passwd"}, "url"),
                        ({"auto_check": "daily"}, "auto_check"), ({"install": True}, "install")]:
        answer = c.put("/api/updates", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field
    c.put("/api/updates", {"url": served.url("/good.json")})
    c.put("/api/settings", {"allow_private_outbound": False})
    refused = c.post("/api/update/check")
    assert refused.status == 502 and "private or loopback" in refused.json["error"]["message"]
    assert served.requests == []


def test_auto_check_raises_update_available_once(keyed, served):
    c = keyed.admin
    with FakeTelegram([TOKEN], ["42"]) as telegram:
        c.put("/api/notifications", {"telegram": {"enabled": True, "bot_token": TOKEN, "chat_id": "42",
                                                  "api_url": telegram.url}})
        answer = c.put("/api/updates", {"url": served.url("/good.json"), "auto_check": True})
        assert answer.status == 200 and answer.json["auto_check"] is True
        message = telegram.wait_for(1)[0]["text"]
        assert message.startswith(f"[contentnode] Update available: contentnode {NEWER}")
        assert "Big one." in message
        # a manual check of the same version does not announce it again; a test message
        # sent afterwards is the next (and only other) message
        assert c.post("/api/update/check").json["latest"] == NEWER
        c.post("/api/notifications/test", {"channel": "telegram"})
        assert [m["text"].splitlines()[0] for m in telegram.messages][1:] == ["[contentnode] Test notification"]
