"""Passkeys through the API (docs/API.md, "Passkeys"), with a software authenticator.

The panel is opened under `localhost:<port>`, so that is the relying party id and
`http://localhost:<port>` the origin. Where the node accepts a credential, the same
credential is also handed to py_webauthn, so the node is not the only judge of the
authenticator the tests wrote.
"""

import copy
import http.client

import pytest

from contentnode.core.backup import BackupError
from contentnode.restore import check_records
from tests.accounts import PASSWORD, audit_lines, create_user, enrol, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER
from tests.soft_authenticator import (SoftAuthenticator, b64url, independently_authenticated,
                                      independently_registered)

pytestmark = pytest.mark.in_process


def _browser(node):
    """A client that opens the panel under localhost:<port>, as a browser on the node would."""
    client = node.client(host=f"localhost:{node.admin_port}")
    client.origin = f"http://localhost:{node.admin_port}"
    return client


def _signed_in(node, username=ADMIN_USER, password=ADMIN_PASSWORD):
    client = _browser(node)
    assert client.login(username, password).status == 200
    return client


def _register(client, password=ADMIN_PASSWORD, name="laptop", authenticator=None):
    """(authenticator, passkey object, the COSE key py_webauthn accepted)."""
    authenticator = authenticator or SoftAuthenticator()
    options = client.post("/api/me/passkeys/options", {"password": password})
    assert options.status == 200, options.body
    options = options.json["options"]
    credential = authenticator.create(options, client.origin)
    accepted_key = independently_registered(credential, options, client.origin)
    made = client.post("/api/me/passkeys", {"name": name, "credential": credential})
    assert made.status == 201, made.body
    return authenticator, made.json, accepted_key


def _policy(admin, passkeys):
    changed = admin.put("/api/policy", {"passkeys": passkeys})
    assert changed.status == 200, changed.body


def _passwordless_options(client, body=None):
    answer = client.post("/api/login/passkey/options", body or {})
    assert answer.status == 200, answer.body
    return answer.json["options"]


def test_register_list_and_sign_in_passwordless(node, admin):
    me = _signed_in(node)
    authenticator, passkey, cose_key = _register(me)
    assert set(passkey) >= {"id", "name", "created_at", "last_used_at"} and passkey["last_used_at"] is None
    listed = me.get("/api/me/passkeys").json["passkeys"]
    assert [p["name"] for p in listed] == ["laptop"]
    assert me.get("/api/me").json["user"]["two_factor"] is True

    browser = _browser(node)
    refused = browser.post("/api/login/passkey/options", {})
    assert refused.status == 403 and refused.error_code == "forbidden"  # policy second_factor (the default)
    _policy(me, "passwordless")
    options = _passwordless_options(browser)
    assert options["userVerification"] == "required" and options["rpId"] == "localhost"
    assertion = authenticator.get(options, browser.origin)
    assert independently_authenticated(assertion, options, browser.origin, cose_key, 0, True) == 1
    signed_in = browser.post("/api/login/passkey", {"credential": assertion})
    assert signed_in.status == 200, signed_in.body
    assert signed_in.json["user"]["username"] == ADMIN_USER
    assert browser.get("/api/session").json["authenticated"] is True
    assert me.get("/api/me/passkeys").json["passkeys"][0]["last_used_at"] is not None
    actions = [e["action"] for e in audit_lines(node)]
    assert "passkey.register" in actions
    assert any(e["action"] == "login.success" and (e.get("detail") or {}).get("method") == "passkey"
               for e in audit_lines(node))


def test_a_wrong_password_for_options_is_invalid_and_counts(node, admin):
    me = _signed_in(node)
    wrong = me.post("/api/me/passkeys/options", {"password": "not the password"})
    assert wrong.status == 400 and wrong.error_code == "invalid" and wrong.json["error"]["field"] == "password"
    for _ in range(4):
        me.post("/api/me/passkeys/options", {"password": "not the password"})
    locked = me.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD})
    assert locked.status == 429  # the account's login lockout, as for a wrong password at login


def test_second_factor_replay_and_a_cloned_counter(node, admin):
    me = _signed_in(node)
    authenticator, _, cose_key = _register(me)
    browser = _browser(node)
    first = browser.login(ADMIN_USER, ADMIN_PASSWORD)
    assert first.json == {"two_factor_required": True, "two_factor_methods": ["passkey"]}
    options = browser.post("/api/login/2fa/passkey-options", {}).json["options"]
    assert options["allowCredentials"][0]["id"] == b64url(authenticator.credential_id)
    assertion = authenticator.get(options, browser.origin)
    assert independently_authenticated(assertion, options, browser.origin, cose_key, 0, False) == 1
    done = browser.post("/api/login/2fa", {"passkey": assertion})
    assert done.status == 200 and done.json["user"]["username"] == ADMIN_USER, done.body

    other = _browser(node)  # the same assertion again, in another pending login: its challenge is used up
    assert other.login(ADMIN_USER, ADMIN_PASSWORD).json["two_factor_required"] is True
    other.post("/api/login/2fa/passkey-options", {})
    replayed = other.post("/api/login/2fa", {"passkey": assertion})
    assert replayed.status == 401 and replayed.error_code == "bad_credentials"

    # a clone of the authenticator signs with a counter that does not grow
    options = other.post("/api/login/2fa/passkey-options", {}).json["options"]
    cloned = authenticator.get(options, other.origin, sign_count=1)
    refused = other.post("/api/login/2fa", {"passkey": cloned})
    assert refused.status == 401 and refused.error_code == "bad_credentials"
    assert any(e["action"] == "passkey.clone_suspected" for e in audit_lines(node))


@pytest.mark.parametrize("spoil", ["origin", "rp_id", "signature", "user_presence", "user_verification"])
def test_a_spoiled_assertion_is_refused_and_counted(node, admin, spoil):
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    _policy(me, "passwordless")
    browser = _browser(node)
    options = _passwordless_options(browser)
    if spoil == "user_verification":
        authenticator.user_verified = False
    assertion = authenticator.get(
        options, "http://evil.example:1" if spoil == "origin" else browser.origin,
        rp_id="evil.example" if spoil == "rp_id" else None, spoil_signature=spoil == "signature",
        user_present=spoil != "user_presence")
    refused = browser.post("/api/login/passkey", {"credential": assertion})
    assert refused.status == 401 and refused.error_code == "bad_credentials", refused.body
    failures = [e for e in audit_lines(node) if e["action"] == "login.passkey_failure"]
    assert failures and failures[-1]["ok"] is False
    assert browser.get("/api/session").json["authenticated"] is False


def _too_deep(credential: dict) -> dict:
    """The credential with a clientDataJSON nested deeper than Python's JSON parser can recurse."""
    spoiled = copy.deepcopy(credential)
    spoiled["response"]["clientDataJSON"] = b64url(b"[" * 1200)
    return spoiled


def test_a_too_deeply_nested_client_data_is_refused_like_any_spoiled_one(node, admin):
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    options = me.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD}).json["options"]
    made = me.post("/api/me/passkeys", {"name": "deep", "credential": _too_deep(
        SoftAuthenticator().create(options, me.origin))})
    assert made.status == 400 and made.json["error"]["field"] == "credential", made.body

    pending = _browser(node)
    assert pending.login(ADMIN_USER, ADMIN_PASSWORD).json["two_factor_required"] is True
    options = pending.post("/api/login/2fa/passkey-options", {}).json["options"]
    second = pending.post("/api/login/2fa", {"passkey": _too_deep(authenticator.get(options, pending.origin))})
    assert second.status == 401 and second.error_code == "bad_credentials", second.body
    assert [e for e in audit_lines(node) if e["action"] == "login.2fa_failure"]

    _policy(me, "passwordless")
    browser = _browser(node)
    options = _passwordless_options(browser)
    refused = browser.post("/api/login/passkey", {"credential": _too_deep(authenticator.get(options, browser.origin))})
    assert refused.status == 401 and refused.error_code == "bad_credentials", refused.body
    assert [e for e in audit_lines(node) if e["action"] == "login.passkey_failure"]
    # nothing named the waiting challenge, so the genuine answer to the same options still signs in
    signed_in = browser.post("/api/login/passkey", {"credential": authenticator.get(options, browser.origin)})
    assert signed_in.status == 200, signed_in.body


def test_a_challenge_expires_after_five_minutes(node, admin):
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    _policy(me, "passwordless")
    browser = _browser(node)
    options = _passwordless_options(browser)
    node.set_clock_offset(301)
    late = browser.post("/api/login/passkey", {"credential": authenticator.get(options, browser.origin)})
    assert late.status == 401


def test_a_named_user_gets_only_their_passkeys_and_a_stranger_a_stand_in(node, admin):
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    _policy(me, "passwordless")
    browser = _browser(node)
    mine = _passwordless_options(browser, {"username": ADMIN_USER})["allowCredentials"]
    assert [d["id"] for d in mine] == [b64url(authenticator.credential_id)]
    stranger = _passwordless_options(browser, {"username": "nobody"})["allowCredentials"]
    again = _passwordless_options(browser, {"username": "nobody"})["allowCredentials"]
    assert len(stranger) in (1, 2) and stranger == again and stranger != mine  # issue 32: the shape of an account
    # a passkey answering options narrowed to another account is refused
    create_user(me, "vera", "viewer")
    options = _passwordless_options(browser, {"username": "vera"})
    refused = browser.post("/api/login/passkey", {"credential": authenticator.get(options, browser.origin)})
    assert refused.status == 401



def _shape(descriptors: list) -> list:
    """What a descriptor list shows besides its random bytes: each entry's members and transports."""
    return [(sorted(d), d.get("transports")) for d in descriptors]


def test_a_stand_in_has_the_shape_of_a_real_account(node, admin):
    """The stand-in carries transports as a registered passkey does, and names differ in how many entries
    and which transports they get (a fixed single bare entry told a stranger from an account)."""
    me = _signed_in(node)
    _register(me)
    _policy(me, "passwordless")
    browser = _browser(node)
    mine = _passwordless_options(browser, {"username": ADMIN_USER})["allowCredentials"]
    strangers = []
    for rounds in range(1, 5):   # 15 names at a time (16 anonymous challenges an address), then let them expire
        strangers += [_passwordless_options(browser, {"username": f"nobody{rounds}-{i}"})["allowCredentials"]
                      for i in range(15)]
        node.set_clock_offset(301 * rounds)
    for stand_in in strangers:
        assert all(sorted(d) == sorted(mine[0]) and d["transports"] for d in stand_in), stand_in
    assert any(_shape(s) == _shape(mine) for s in strangers)   # a stranger may look exactly like this account
    assert len({len(s) for s in strangers}) > 1 and len({str(_shape(s)) for s in strangers}) > 2
    assert {len(d["id"]) for s in strangers for d in s} != {43}  # ids not all 32 bytes long


def test_anonymous_options_are_capped_per_address(node, admin):
    _policy(admin, "passwordless")
    browser = _browser(node)
    answers = [browser.post("/api/login/passkey/options", {}).status for _ in range(17)]
    assert answers[:16] == [200] * 16 and answers[16] == 429



def _options_from(node, source: str) -> int:
    """POST /api/login/passkey/options from another loopback address (all of 127/8 reaches the node)."""
    conn = http.client.HTTPConnection("127.0.0.1", node.admin_port, timeout=15, source_address=(source, 0))
    try:
        conn.request("POST", "/api/login/passkey/options", body=b"{}",
                     headers={"Host": f"localhost:{node.admin_port}", "Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_flood_from_many_addresses_evicts_its_own_oldest_challenges(node, admin):
    """32 addresses holding 16 challenges each fill the 512: a newcomer still gets options (the busiest
    group's oldest challenge goes, it was refused 429 for five minutes before), and a sign-in started
    before the flood still completes."""
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    _policy(me, "passwordless")
    browser = _browser(node)
    early = _passwordless_options(browser)
    flood = [_options_from(node, f"127.0.1.{i}") for i in range(32) for _ in range(16)]
    assert flood == [200] * 512     # with the early one, the last of these was past the 512
    newcomer = [_options_from(node, "127.0.2.1") for _ in range(17)]
    assert newcomer == [200] * 16 + [429]     # one address still holds 16 at most
    signed_in = browser.post("/api/login/passkey", {"credential": authenticator.get(early, browser.origin)})
    assert signed_in.status == 200, signed_in.body


def test_removal_and_the_last_second_factor(node, admin):
    me = _signed_in(node)
    authenticator, passkey, _ = _register(me)
    _policy(me, "passwordless")
    me.put("/api/policy", {"two_factor": "all"})
    kept = me.delete(f"/api/me/passkeys/{passkey['id']}")
    assert kept.status == 409  # the policy needs a second factor and this is the only one
    me.put("/api/policy", {"two_factor": "optional"})
    assert me.delete(f"/api/me/passkeys/{passkey['id']}").status == 204
    assert me.get("/api/me/passkeys").json["passkeys"] == []
    assert me.delete(f"/api/me/passkeys/{passkey['id']}").status == 404
    browser = _browser(node)
    gone = browser.post("/api/login/passkey", {"credential": authenticator.get(_passwordless_options(browser),
                                                                               browser.origin)})
    assert gone.status == 401


def test_registration_checks(node, admin):
    by_address = admin.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD})
    assert by_address.status == 409  # Host 127.0.0.1: browsers refuse an address as relying party id
    me = _signed_in(node)
    options = me.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD}).json["options"]
    assert options["attestation"] == "none" and options["rp"]["id"] == "localhost"
    assert [p["alg"] for p in options["pubKeyCredParams"]][:2] == [-8, -7]
    authenticator = SoftAuthenticator(algorithm="Ed25519")
    wrong_origin = me.post("/api/me/passkeys", {"name": "x", "credential": authenticator.create(
        options, "http://localhost:1")})
    assert wrong_origin.status == 400 and wrong_origin.json["error"]["field"] == "credential"
    # the challenge is used up by that try, even though it failed
    again = me.post("/api/me/passkeys", {"name": "x", "credential": authenticator.create(options, me.origin)})
    assert again.status == 400
    _register(me, authenticator=authenticator, name="ed25519")  # Ed25519 works end to end
    unknown_fmt = me.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD}).json["options"]
    odd = me.post("/api/me/passkeys", {"name": "y", "credential": SoftAuthenticator().create(
        unknown_fmt, me.origin, fmt="made-up")})
    assert odd.status == 400


def test_a_token_session_cannot_reach_passkeys(node, admin):
    me = _signed_in(node)
    _, passkey, _ = _register(me)
    made = me.post("/api/me/tokens", {"name": "script", "scopes": ["users:manage"], "password": ADMIN_PASSWORD})
    script = _browser(node)
    assert script.post("/api/login", {"token": made.json["secret"]}).status == 200
    for response in (script.get("/api/me/passkeys"),
                     script.post("/api/me/passkeys/options", {"password": ADMIN_PASSWORD}),
                     script.delete(f"/api/me/passkeys/{passkey['id']}")):
        assert response.status == 403 and response.error_code == "forbidden", response.body
    assert len(me.get("/api/me/passkeys").json["passkeys"]) == 1


def test_a_two_factor_reset_clears_passkeys(node, admin):
    create_user(admin, "vera", "viewer")
    vera = _signed_in(node, "vera", PASSWORD)
    authenticator, _, _ = _register(vera, password=PASSWORD)
    vera_id = vera.get("/api/me").json["user"]["id"]
    assert admin.delete(f"/api/users/{vera_id}/2fa").status == 204
    assert _browser(node).login("vera", PASSWORD).json.get("user", {}).get("username") == "vera"
    reset = [e for e in audit_lines(node) if e["action"] == "user.2fa_reset"][-1]
    assert reset["detail"]["passkeys_removed"] == 1


def test_restore_keeps_passkeys(node, admin):
    me = _signed_in(node)
    authenticator, _, _ = _register(me)
    plain = me.post("/api/backup/export", {}).json
    stored = plain["data"]["users"][me.get("/api/me").json["user"]["id"]]["passkeys"][0]
    assert set(stored) >= {"public_key", "credential_id", "sign_count"}  # public keys only: nothing secret
    sealed = me.post("/api/backup/export", {"passphrase": "a backup passphrase"}).json
    later, _, _ = _register(me, name="phone")  # made after the backup
    restored = me.post("/api/backup/restore", {"backup": sealed, "passphrase": "a backup passphrase"})
    assert restored.status == 200, restored.body
    _policy(me, "passwordless")
    for each in (authenticator, later):
        browser = _browser(node)
        signed_in = browser.post("/api/login/passkey", {"credential": each.get(_passwordless_options(browser),
                                                                               browser.origin)})
        assert signed_in.status == 200, signed_in.body


def test_a_passkey_removed_since_the_backup_stays_removed(node, admin):
    """A lost phone's passkey was removed: restoring a backup from before must not let it in again."""
    me = _signed_in(node)
    lost, passkey, _ = _register(me, name="lost phone")
    kept, _, _ = _register(me, name="laptop")
    sealed = me.post("/api/backup/export", {"passphrase": "a backup passphrase"}).json
    assert me.delete(f"/api/me/passkeys/{passkey['id']}").status == 204
    restored = me.post("/api/backup/restore", {"backup": sealed, "passphrase": "a backup passphrase"})
    assert restored.status == 200, restored.body
    assert restored.json["kept"]["users_credentials"] == [{"user": ADMIN_USER, "kept": ["two_factor"]}]
    assert [p["name"] for p in me.get("/api/me/passkeys").json["passkeys"]] == ["laptop"]
    _policy(me, "passwordless")
    for authenticator, status in ((lost, 401), (kept, 200)):
        browser = _browser(node)
        answer = browser.post("/api/login/passkey", {"credential": authenticator.get(_passwordless_options(browser),
                                                                                     browser.origin)})
        assert answer.status == status, answer.body


def test_a_restore_refuses_damaged_or_doubled_passkeys(node, admin):
    me = _signed_in(node)
    _register(me)
    doc = copy.deepcopy(node.app.store.data)
    check_records(doc)  # as stored: fine
    user = next(u for u in doc["users"].values() if u.get("passkeys"))
    damaged = copy.deepcopy(doc)
    next(u for u in damaged["users"].values() if u.get("passkeys"))["passkeys"][0]["public_key"] = b64url(b"\xa0")
    with pytest.raises(BackupError, match="algorithm"):
        check_records(damaged)
    doubled = copy.deepcopy(doc)
    other = dict(copy.deepcopy(user), id="0123456789abcdef", username="twin", role="viewer")
    doubled["users"][other["id"]] = other
    with pytest.raises(BackupError, match="registered twice"):
        check_records(doubled)


def test_totp_may_be_turned_off_while_a_passkey_keeps_the_second_factor(node, admin):
    me = _signed_in(node)
    enrol(me, ADMIN_PASSWORD, mid_step_offset(node))
    assert me.put("/api/policy", {"two_factor": "all"}).status == 200
    refused = me.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD})
    assert refused.status == 409  # TOTP is the only second factor
    assert me.get("/api/me/2fa").json["turn_off_allowed"] is False
    _, passkey, _ = _register(me)
    assert me.get("/api/me/2fa").json["turn_off_allowed"] is True
    assert me.post("/api/me/2fa/disable", {"password": ADMIN_PASSWORD}).status == 200
    assert me.get("/api/session").json["two_factor_enrollment_required"] is False
    assert me.delete(f"/api/me/passkeys/{passkey['id']}").status == 409  # now the last one
