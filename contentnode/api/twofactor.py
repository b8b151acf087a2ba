"""Two-factor authentication: the second login step, and each user's own TOTP set-up.

Set-up, disabling and new recovery codes need the password (docs/API.md, "Two-factor authentication"), and
wrong passwords count towards the account's login lockout, so a stolen
session cannot guess the password here. Second-step failures count on their
own key ("2fa:<name>"), which a correct password does not clear.
"""

from contentnode.core import fields as v
from contentnode.api.login import (attempt_succeeded, check_rate_limit, complete_login, confirm_password,
                                   count_failure, two_factor_keys)
from contentnode.api.passkeys import CREDENTIAL, pending_user, second_factor_login
from contentnode.auth import totp
from contentnode.auth.passkeys import has_second_factor
from contentnode.auth.policy import TWO_FACTOR_MODES, requires_two_factor
from contentnode.auth.users import public_user
from contentnode.core import settings as st
from contentnode.http.errors import ApiError, conflict, invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, answer, obj, one_of, text


def _check_second_factor(state: dict, code: str, now: float) -> str | None:
    """Consume `code` in `state` (a user's "totp" member being changed); which kind it was."""
    if not state.get("enabled"):
        return None
    if totp.is_totp_code(code):
        step = totp.matching_step(state["secret"], code, now, state.get("last_step"))
        if step is None:
            return None
        state["last_step"] = step
        return "totp"
    remaining = totp.remaining_after_recovery(state.get("recovery") or [], code)
    if remaining is None:
        return None
    state["recovery"] = remaining
    return "recovery"


def login_second_step(req):
    """POST /api/login/2fa {"code"} or {"passkey"}: a TOTP code, one recovery code or a passkey
    completes a pending login."""
    user = pending_user(req)
    body = req.body
    if "passkey" in body:
        v.only(body, {"passkey"})
        return second_factor_login(req, body["passkey"])
    code = v.text(body, "code", max_len=64)
    keys = two_factor_keys(req, user["username"])
    check_rate_limit(req, keys)
    with req.app.store.transaction() as doc:
        record = doc["users"].get(user["id"])
        kind = _check_second_factor(record.get("totp") or {}, code, req.app.clock.now()) if record else None
        left = len(record["totp"].get("recovery") or []) if kind else 0
    if kind is None:
        count_failure(req, keys, user["username"], "login.2fa_failure")
        raise ApiError(401, "bad_credentials", "the code is wrong, expired or was already used", "code")
    attempt_succeeded(req)
    req.app.login_limiter.clear(keys[1])
    if kind == "recovery":
        req.user = user
        req.audit("2fa.recovery_used", target=user["username"], detail={"codes_left": left})
    return complete_login(req, user)


def _state(user: dict) -> dict:
    return user.get("totp") or {}


def status(req):
    """GET /api/me/2fa: what the panel needs to show the 2FA card."""
    state = _state(req.user)
    policy = req.app.store.data["policy"]
    return {
        "enabled": bool(state.get("enabled")),
        "setup_pending": bool(state.get("pending_secret")),
        "required": requires_two_factor(policy, req.user),
        "policy": policy["two_factor"],
        "recovery_codes_left": len(state.get("recovery") or []) if state.get("enabled") else 0,
        "turn_off_allowed": bool(state.get("enabled")) and _may_turn_off(policy, req.user),
    }


def setup(req):
    """A new secret, not active until /enable confirms a code from it (replaces 2FA when already on)."""
    body = req.body
    if req.app.store.data["policy"]["two_factor"] == "off" and not _state(req.user).get("enabled"):
        raise conflict("conflict", "the policy turns two-factor authentication off on this node")
    confirm_password(req, body, "2fa.password_failure")
    secret = totp.new_secret()
    with req.app.store.transaction() as doc:
        record = doc["users"][req.user["id"]]
        record["totp"] = dict(record.get("totp") or {"enabled": False}, pending_secret=secret)
    req.audit("2fa.setup", target=req.user["username"])
    issuer = st.effective(req.app.store.data)["node_name"]
    return {"secret": secret, "otpauth_uri": totp.provisioning_uri(secret, req.user["username"], issuer),
            "enabled": bool(_state(req.user).get("enabled"))}


def enable(req):
    """Confirm the set-up secret with a code: 2FA is on, ten recovery codes are shown once."""
    body = req.body
    code = v.text(body, "code", max_len=16)
    codes, hashes = totp.new_recovery_codes()
    with req.app.store.transaction() as doc:
        record = doc["users"][req.user["id"]]
        secret = (record.get("totp") or {}).get("pending_secret")
        if not secret:
            raise conflict("conflict", "no set-up is waiting; POST /api/me/2fa/setup first")
        step = totp.matching_step(secret, code, req.app.clock.now())
        if step is None:
            raise invalid("the code does not match; check the authenticator app and its clock", "code")
        record["totp"] = totp.enabled_state(secret, step, hashes, req.app.clock.now())
        user = record
    ended = req.app.sessions.end_user_sessions(user["id"], keep_id=req.session["id"])
    req.audit("2fa.enable", target=user["username"], detail={"other_sessions_ended": ended})
    return {"user": public_user(user), "recovery_codes": codes}


def _require_enabled(req) -> None:
    if not _state(req.user).get("enabled"):
        raise conflict("conflict", "two-factor authentication is not enabled for this account")


def _may_turn_off(policy: dict, user: dict) -> bool:
    """Whether the policy lets TOTP go: 2FA is not required of the account, or a passkey stays."""
    return not requires_two_factor(policy, user) or has_second_factor(dict(user, totp={}), policy)


def disable(req):
    body = req.body
    _require_enabled(req)
    if not _may_turn_off(req.app.store.data["policy"], req.user):
        raise conflict("conflict", "the policy requires two-factor authentication for this account "
                                   "(a passkey would do instead)")
    confirm_password(req, body, "2fa.password_failure")
    with req.app.store.transaction() as doc:
        record = doc["users"][req.user["id"]]
        record["totp"] = {"enabled": False}
        user = record
    req.audit("2fa.disable", target=user["username"])
    return {"user": public_user(user)}


def regenerate_recovery_codes(req):
    """Ten new recovery codes; every earlier one stops working."""
    body = req.body
    _require_enabled(req)
    confirm_password(req, body, "2fa.password_failure")
    codes, hashes = totp.new_recovery_codes()
    with req.app.store.transaction() as doc:
        doc["users"][req.user["id"]]["totp"]["recovery"] = hashes
    req.audit("2fa.recovery_regenerate", target=req.user["username"])
    return {"recovery_codes": codes}


PASSWORD_BODY = obj({"password": {"type": "string", "minLength": 1}}, required=["password"])
SECOND_STEP_BODY = obj({"code": text(64), "passkey": CREDENTIAL},
                       description='{"code"}: a TOTP code or a recovery code; or {"passkey"}: the answer to '
                                   'POST /api/login/2fa/passkey-options')
ENABLE_BODY = obj({"code": text(16)}, required=["code"], description="a code from the set-up secret")

STATUS = answer({"enabled": BOOLEAN, "setup_pending": BOOLEAN, "required": BOOLEAN,
                 "policy": one_of(*TWO_FACTOR_MODES), "recovery_codes_left": {"type": "integer", "minimum": 0},
                 "turn_off_allowed": BOOLEAN})

ROUTES = [
    Route("POST", "/api/login/2fa", "public", login_second_step, body=SECOND_STEP_BODY),
    Route("GET", "/api/me/2fa", "login", status, enrolment_exempt=True, answer=STATUS, token_session=False),
    Route("POST", "/api/me/2fa/setup", "login", setup, enrolment_exempt=True, body=PASSWORD_BODY, token_session=False),
    Route("POST", "/api/me/2fa/enable", "login", enable, enrolment_exempt=True, body=ENABLE_BODY, token_session=False),
    Route("POST", "/api/me/2fa/disable", "login", disable, enrolment_exempt=True, body=PASSWORD_BODY,
          token_session=False),
    Route("POST", "/api/me/2fa/recovery-codes", "login", regenerate_recovery_codes, enrolment_exempt=True,
          body=PASSWORD_BODY, token_session=False),
]
