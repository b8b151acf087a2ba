"""Passkeys (WebAuthn): register them in My account, sign in with one, or use one as the second factor.

Options and credentials travel in the WebAuthn Level 3 JSON forms. The relying
party id is the host the request came in under, the expected origin that
scheme, host and port (docs/API.md, "Passkeys"). Every failed sign-in with a
passkey counts like a wrong password; a sign counter that does not grow is
audited as a possible clone.
"""

import hashlib
import hmac
import ipaddress

from contentnode.api.login import (attempt_succeeded, check_rate_limit, complete_login, confirm_password,
                                   count_failure, two_factor_keys)
from contentnode.auth import passkeys
from contentnode.auth.policy import requires_two_factor
from contentnode.auth.ratelimit import address_key, password_key
from contentnode.auth.users import find_by_username
from contentnode.clock import rfc3339
from contentnode.core import settings as st
from contentnode.core import webauthn
from contentnode.http.errors import ApiError, conflict, forbidden, invalid, not_found, rate_limited
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, listing, nullable, obj, text

BAD_PASSKEY = "the passkey could not be verified"


# --------------------------------------------------------------- ceremony context


def _relying_party(req) -> tuple[str, str]:
    """(rp id, origin) of this request: its host name, and its scheme, host and port."""
    host = req.host_name()
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host, f"{req.scheme}://{req.host}"
    raise conflict("conflict", "passkeys need the panel opened under a host name (localhost or the admin host), "
                               "not an address: browsers refuse an address as the relying party id")


def _expected(challenge: passkeys.Challenge, user_verification: bool) -> webauthn.Expected:
    return webauthn.Expected(challenge.value, challenge.rp_id, challenge.origin, user_verification)


def _issue(req, ceremony: str, bound_to, user_id) -> passkeys.Challenge:
    rp_id, origin = _relying_party(req)
    try:
        return req.app.passkey_challenges.issue(ceremony, bound_to, user_id, rp_id, origin, req.client_ip)
    except passkeys.ChallengesFull as full:
        raise rate_limited(full.retry_after, "too many passkey sign-ins are waiting; try again shortly") from None


def _taken(req, credential, ceremony: str, bound_to) -> passkeys.Challenge | None:
    """The ceremony's challenge this credential answers, used up; None when none is waiting."""
    try:
        value = webauthn.challenge_of(credential)
    except webauthn.WebAuthnError:
        return None
    return req.app.passkey_challenges.take(value, ceremony, bound_to)


def _descriptors(records: list) -> list:
    return [{"type": "public-key", "id": p["credential_id"], **({"transports": p["transports"]}
                                                               if p.get("transports") else {})}
            for p in records]


def _require_usable(req) -> None:
    if not passkeys.usable(req.app.store.data["policy"]):
        raise forbidden("forbidden", "the policy turns passkeys off on this node")


# --------------------------------------------------------------- My account


def public_passkey(record: dict) -> dict:
    return {"id": record["id"], "name": record["name"], "created_at": rfc3339(record["created_at"]),
            "last_used_at": rfc3339(record.get("last_used_at")), "backup_eligible": record["backup_eligible"],
            "backed_up": record["backup_state"]}


def list_own(req):
    return {"passkeys": [public_passkey(p) for p in passkeys.of_user(req.user)]}


def creation_options(req):
    """POST /api/me/passkeys/options {"password"}: the options for navigator.credentials.create()."""
    _require_usable(req)
    confirm_password(req, req.body, "passkey.password_failure")
    user = req.user
    if len(passkeys.of_user(user)) >= passkeys.MAX_PASSKEYS:
        raise conflict("conflict", f"an account holds at most {passkeys.MAX_PASSKEYS} passkeys; remove one first")
    challenge = _issue(req, passkeys.REGISTER, req.session["id"], user["id"])
    passwordless = req.app.store.data["policy"].get("passkeys") == "passwordless"
    options = {
        "rp": {"id": challenge.rp_id, "name": st.effective(req.app.store.data)["node_name"]},
        "user": {"id": webauthn.b64url(user["id"].encode()), "name": user["username"],
                 "displayName": user["username"]},
        "challenge": challenge.value,
        "pubKeyCredParams": [{"type": "public-key", "alg": alg} for alg in webauthn.ALGORITHMS],
        "timeout": int(passkeys.CHALLENGE_LIFETIME * 1000),
        "excludeCredentials": _descriptors(passkeys.of_user(user)),
        "authenticatorSelection": {"residentKey": "required" if passwordless else "preferred",
                                   "requireResidentKey": passwordless, "userVerification": "preferred"},
        "attestation": "none",
        "extensions": {"credProps": True},
    }
    return {"options": options}


def register(req):
    """POST /api/me/passkeys {"name", "credential"}: the answer to this session's creation options."""
    _require_usable(req)
    body = req.body
    name = " ".join(body["name"].split())
    if not name:
        raise invalid("name must not be blank", "name")
    if any(p["name"].lower() == name.lower() for p in passkeys.of_user(req.user)):
        raise conflict("conflict", f"you already have a passkey named {name!r}", "name")
    credential = body["credential"]
    challenge = _taken(req, credential, passkeys.REGISTER, req.session["id"])
    if challenge is None or challenge.user_id != req.user["id"]:
        raise invalid("this credential answers no creation options of this session (they are used once and "
                      "expire after 5 minutes); ask for new options", "credential")
    try:
        new = webauthn.verify_registration(credential, _expected(challenge, user_verification=False))
    except webauthn.WebAuthnError as exc:
        raise invalid(f"the passkey was not accepted: {exc}", "credential") from None
    transports = (credential.get("response") or {}).get("transports")
    transports = [t for t in transports if isinstance(t, str) and len(t) <= 32][:8] if isinstance(transports, list) else []
    record = passkeys.new_record(new, name, transports, req.app.clock.now())
    with req.app.store.transaction() as doc:
        if passkeys.owner_of(doc["users"], new.credential_id) is not None:
            raise conflict("conflict", "this passkey is already registered", "credential")
        account = doc["users"][req.user["id"]]
        if len(passkeys.of_user(account)) >= passkeys.MAX_PASSKEYS:
            raise conflict("conflict", f"an account holds at most {passkeys.MAX_PASSKEYS} passkeys")
        first = not passkeys.has_second_factor(account, doc["policy"])
        account["passkeys"] = passkeys.of_user(account) + [record]
    # the account's first second factor: a session stolen before it must not outlive it (as for TOTP)
    ended = req.app.sessions.end_user_sessions(req.user["id"], keep_id=req.session["id"]) if first else 0
    req.audit("passkey.register", target=req.user["username"],
              detail={"passkey": record["id"], "name": name, "algorithm": new.algorithm,
                      "backup_eligible": new.backup_eligible, "other_sessions_ended": ended})
    return created(public_passkey(record))


def remove(req):
    """DELETE /api/me/passkeys/{id}: refused when the policy needs 2FA and this is the last second factor."""
    wanted = req.params["id"]
    with req.app.store.transaction() as doc:
        account = doc["users"][req.user["id"]]
        record = next((p for p in passkeys.of_user(account) if p["id"] == wanted), None)
        if record is None:
            raise not_found("no passkey with this id on your account")
        left = dict(account, passkeys=[p for p in passkeys.of_user(account) if p["id"] != wanted])
        policy = doc["policy"]
        if requires_two_factor(policy, account) and not passkeys.has_second_factor(left, policy):
            raise conflict("conflict", "the policy requires two-factor authentication for this account and this "
                                       "is its last second factor; add another first")
        account["passkeys"] = left["passkeys"]
    req.audit("passkey.remove", target=req.user["username"], detail={"passkey": wanted, "name": record["name"]})
    return no_content()


# --------------------------------------------------------------- sign-in


def _request_options(challenge: passkeys.Challenge, allowed: list, user_verification: str) -> dict:
    return {"challenge": challenge.value, "rpId": challenge.rp_id, "timeout": int(passkeys.CHALLENGE_LIFETIME * 1000),
            "allowCredentials": allowed, "userVerification": user_verification}


# What real passkeys look like, for the stand-in to look like one: credential id lengths (bytes) and
# transports that common authenticators report (phones, laptops, security keys).
_STAND_IN_ID_BYTES = (16, 16, 20, 32, 32, 64)
_STAND_IN_TRANSPORTS = (["internal"], ["hybrid", "internal"], ["internal"], ["usb"], ["nfc", "usb"],
                        ["hybrid", "internal"])


def _stand_in_descriptors(req, username: str) -> list:
    """For a name without passkeys: made-up descriptors of the shape real ones have (one or two
    entries, an id length and transports of a common authenticator), the same each time for the
    same name, so the answer does not tell which accounts exist or have passkeys."""
    secret = req.app.store.data["node"]["secret"].encode()
    seed = hmac.new(secret, b"passkey-stand-in:" + username.strip().lower().encode(), hashlib.sha256).digest()
    out = []
    for index in range(1 + (seed[0] % 4 == 0)):   # two entries for one name in four, as with a spare key
        fake = hmac.new(seed, bytes([index]), hashlib.sha512).digest()
        out.append({"type": "public-key", "id": webauthn.b64url(fake[:_STAND_IN_ID_BYTES[fake[0] % 6]]),
                    "transports": list(_STAND_IN_TRANSPORTS[fake[1] % 6])})
    return out


def _require_passwordless(req) -> None:
    if req.app.store.data["policy"].get("passkeys") != "passwordless":
        raise forbidden("forbidden", "signing in with a passkey alone is off: the policy's passkeys member is not "
                                     "\"passwordless\"")


def passwordless_options(req):
    """POST /api/login/passkey/options {"username"?}: options for navigator.credentials.get()."""
    _require_passwordless(req)
    username = (req.body or {}).get("username")
    allowed, user_id = [], None
    if username is not None:
        user = find_by_username(req.app.store.data["users"], username)
        user_id = user["id"] if user else "-"  # "-": no account; the sign-in will fail like a wrong passkey
        allowed = _descriptors(passkeys.of_user(user)) if user else []
        allowed = allowed or _stand_in_descriptors(req, username)
    challenge = _issue(req, passkeys.PASSWORDLESS, None, user_id)
    return {"options": _request_options(challenge, allowed, "required")}


def _verified(req, credential, challenge, user: dict, record: dict, user_verification: bool) -> str | None:
    """Check an assertion by `record` of `user` and store its new counter: None, or why it failed."""
    try:
        assertion = webauthn.verify_assertion(credential, _expected(challenge, user_verification),
                                              webauthn.from_b64url(record["public_key"], "public_key"),
                                              record["sign_count"], record["backup_eligible"])
    except webauthn.CounterWentBack as exc:
        req.audit("passkey.clone_suspected", target=user["username"], ok=False,
                  detail={"passkey": record["id"], "name": record["name"], "reason": str(exc)})
        return str(exc)
    except webauthn.WebAuthnError as exc:
        return str(exc)
    with req.app.store.transaction() as doc:
        account = doc["users"].get(user["id"])
        stored = next((p for p in passkeys.of_user(account or {}) if p["id"] == record["id"]), None)
        if stored is None or stored["sign_count"] != record["sign_count"]:
            return "the passkey changed while it was being checked"  # removed, or used by a parallel sign-in
        passkeys.record_use(stored, assertion, req.app.clock.now())
    return None


def _raw_id(credential) -> bytes | None:
    try:
        return webauthn.credential_id(credential)
    except webauthn.WebAuthnError:
        return None


def _owner(req, credential) -> tuple[dict, dict] | None:
    raw_id = _raw_id(credential)
    return None if raw_id is None else passkeys.owner_of(req.app.store.data["users"], raw_id)


def passwordless_login(req):
    """POST /api/login/passkey {"credential"}: a discoverable passkey with user verification signs in."""
    _require_passwordless(req)
    credential = req.body["credential"]
    found = _owner(req, credential)
    user = found[0] if found else None
    keys = (address_key(req.client_ip),) + ((password_key(user["username"]),) if user else ())
    check_rate_limit(req, keys)
    challenge = _taken(req, credential, passkeys.PASSWORDLESS, None)
    problem = None
    if challenge is None:
        problem = "no sign-in is waiting for this answer (options are used once and expire after 5 minutes)"
    elif found is None or user.get("disabled"):
        problem = "no account has this passkey"
    elif challenge.user_id not in (None, user["id"]):
        problem = "the passkey is not one of the named account's"
    else:
        handle = _user_handle(credential)
        if handle is not None and handle != user["id"].encode():
            problem = "the passkey's user handle is not its account's"
        else:
            problem = _verified(req, credential, challenge, user, found[1], user_verification=True)
    if problem is not None:
        count_failure(req, keys, user["username"] if user else "", "login.passkey_failure", {"reason": problem})
        raise ApiError(401, "bad_credentials", BAD_PASSKEY)
    attempt_succeeded(req)
    req.app.login_limiter.clear(password_key(user["username"]))
    return complete_login(req, req.app.store.data["users"][user["id"]], method="passkey")


def _user_handle(credential) -> bytes | None:
    try:
        return webauthn.user_handle(credential)
    except webauthn.WebAuthnError:
        return b""  # a malformed handle matches no account


def second_factor_options(req):
    """POST /api/login/2fa/passkey-options: options for the second step of a pending login."""
    user = pending_user(req)
    records = passkeys.of_user(user)
    if not passkeys.usable(req.app.store.data["policy"]) or not records:
        raise conflict("conflict", "this account has no passkey to use as its second factor; enter a code")
    challenge = _issue(req, passkeys.SECOND_FACTOR, req.pending_session["id"], user["id"])
    return {"options": _request_options(challenge, _descriptors(records), "preferred")}


def pending_user(req) -> dict:
    if req.pending_session is None or req.pending_user is None:
        raise ApiError(401, "unauthenticated",
                       "no login is waiting for a second factor (it expires after 5 minutes); "
                       "log in with the password first")
    return req.pending_user


def second_factor_login(req, credential):
    """POST /api/login/2fa {"passkey"}: a passkey of the pending user completes the login."""
    user = pending_user(req)
    keys = two_factor_keys(req, user["username"])
    check_rate_limit(req, keys)
    challenge = _taken(req, credential, passkeys.SECOND_FACTOR, req.pending_session["id"])
    raw_id = _raw_id(credential)
    record = None if raw_id is None else passkeys.find(user, raw_id)
    if challenge is None:
        problem = "no second step is waiting for this answer (options are used once and expire after 5 minutes)"
    elif record is None or not passkeys.usable(req.app.store.data["policy"]):
        problem = "the passkey is not one of this account's"
    else:
        problem = _verified(req, credential, challenge, user, record, user_verification=False)
    if problem is not None:
        count_failure(req, keys, user["username"], "login.2fa_failure", {"reason": problem, "method": "passkey"})
        raise ApiError(401, "bad_credentials", BAD_PASSKEY, "passkey")
    attempt_succeeded(req)
    req.app.login_limiter.clear(keys[1])
    return complete_login(req, req.app.store.data["users"][user["id"]], method="passkey")


# --------------------------------------------------------------- schemas and routes

# PublicKeyCredential.toJSON(): the members checked by core.webauthn; the response object is the
# browser's (its members differ between create and get, and Level 3 adds more).
CREDENTIAL = obj({"id": text(1400), "rawId": text(1400), "type": {"enum": ["public-key"]},
                  "authenticatorAttachment": nullable(STRING), "response": {"type": "object"},
                  "clientExtensionResults": {"type": "object"}},
                 required=["id", "rawId", "type", "response"],
                 description="a PublicKeyCredential as its toJSON() gives it")
PASSWORD_BODY = obj({"password": {"type": "string", "minLength": 1}}, required=["password"])
REGISTER_BODY = obj({"name": text(64), "credential": CREDENTIAL}, required=["name", "credential"])
USERNAME_BODY = obj({"username": text(200)}, description="a username narrows the sign-in to that account's passkeys")
LOGIN_BODY = obj({"credential": CREDENTIAL}, required=["credential"])
OPTIONS = answer({"options": {"type": "object"}})
PASSKEY = answer({"id": STRING, "name": STRING, "created_at": STRING, "last_used_at": nullable(STRING),
                  "backup_eligible": BOOLEAN, "backed_up": BOOLEAN})

ROUTES = [
    Route("GET", "/api/me/passkeys", "login", list_own, enrolment_exempt=True, answer=listing("passkeys", PASSKEY),
          token_session=False),
    Route("POST", "/api/me/passkeys/options", "login", creation_options, enrolment_exempt=True, body=PASSWORD_BODY,
          answer=OPTIONS, token_session=False),
    Route("POST", "/api/me/passkeys", "login", register, status=201, enrolment_exempt=True, body=REGISTER_BODY,
          answer=PASSKEY, token_session=False),
    Route("DELETE", "/api/me/passkeys/{id}", "login", remove, status=204, enrolment_exempt=True, token_session=False),
    Route("POST", "/api/login/passkey/options", "public", passwordless_options, body=USERNAME_BODY,
          body_optional=True, answer=OPTIONS),
    Route("POST", "/api/login/passkey", "public", passwordless_login, body=LOGIN_BODY,
          answer=answer({"user": {"type": "object"}})),
    Route("POST", "/api/login/2fa/passkey-options", "public", second_factor_options, body=obj({}),
          body_optional=True, answer=OPTIONS),
]
