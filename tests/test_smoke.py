"""The daemon starts, answers health, and the first administrator can be created once."""

from tests.node import ADMIN_PASSWORD, ADMIN_USER


def test_health_and_setup_once(node):
    c = node.client()
    assert c.get("/healthz").json == {"status": "ok"}
    session = c.get("/api/session").json
    assert session["setup_required"] is True and session["authenticated"] is False
    first = c.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert first.status == 201 and first.json["user"]["role"] == "admin"
    again = node.client().post("/api/setup", {"username": "other", "password": ADMIN_PASSWORD})
    assert again.status == 409 and again.error_code == "setup_done"
    assert c.get("/api/me").json["user"]["username"] == ADMIN_USER
    assert c.get("/api/session").json["setup_required"] is False
