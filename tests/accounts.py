"""Helpers for tests about users and two-factor login: accounts, logins, TOTP codes."""

import json
import os
import time

import pyotp

from tests.node import ADMIN_PASSWORD

PASSWORD = "a perfectly long passphrase"


def create_user(admin, username: str, role: str = "viewer", scopes=None, password: str = PASSWORD) -> dict:
    body = {"username": username, "password": password, "role": role}
    if scopes is not None:
        body["scopes"] = scopes
    response = admin.post("/api/users", body)
    assert response.status == 201, response.body
    return response.json


def logged_in(node, username: str, password: str = PASSWORD):
    client = node.client()
    response = client.login(username, password)
    assert response.status == 200 and "user" in response.json, response.body
    return client


def mid_step_offset(node, shift: float = 0.0) -> float:
    """Move the daemon's clock by about `shift`, landing mid TOTP step: codes computed now stay valid."""
    offset = shift + 15 - (time.time() + shift) % 30
    node.set_clock_offset(offset)
    return offset


def code(secret: str, offset: float, steps: int = 0) -> str:
    """The TOTP code at the daemon's time (real time + offset), `steps` steps away."""
    return pyotp.TOTP(secret).at(time.time() + offset + 30 * steps)


def wrong_code(secret: str, offset: float) -> str:
    """A six-digit code that no step within the accepted drift produces."""
    near = {code(secret, offset, steps) for steps in (-2, -1, 0, 1, 2)}
    return next(c for c in ("111111", "222222", "333333", "444444", "555555", "666666") if c not in near)


def enrol(client, password: str = ADMIN_PASSWORD, offset: float = 0.0) -> tuple:
    """Set up and enable 2FA for the client's user; (secret, recovery codes)."""
    setup = client.post("/api/me/2fa/setup", {"password": password})
    assert setup.status == 200, setup.body
    secret = setup.json["secret"]
    enabled = client.post("/api/me/2fa/enable", {"code": code(secret, offset)})
    assert enabled.status == 200, enabled.body
    return secret, enabled.json["recovery_codes"]


def audit_lines(node) -> list:
    """Every audit entry on disk, oldest first."""
    entries = []
    for name in sorted(os.listdir(node.data_dir), reverse=True):
        if name.startswith("audit.jsonl"):
            with open(os.path.join(node.data_dir, name), encoding="utf-8") as f:
                entries += [json.loads(line) for line in f if line.strip()]
    return entries
