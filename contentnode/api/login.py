"""Session state, first-time setup, login and logout (docs/API.md, "Authentication")."""

import hashlib
import hmac

from contentnode.core import fields as v
from contentnode.auth.policy import PASSKEY_MODES, TWO_FACTOR_MODES, effective
from contentnode.auth.scopes import ROLES, SCOPES
from contentnode.auth.passwords import MAX_LENGTH as PASSWORD_MAX_LENGTH, password_problem
from contentnode.auth import passkeys, tokens
from contentnode.auth.ratelimit import address_key, password_key, second_factor_key, token_key
from contentnode.auth.sessions import PENDING_LIFETIME, clear_cookie_header, cookie_header
from contentnode.auth.users import USERNAME_PATTERN, find_by_username, new_user, new_username, public_user
from contentnode.http.errors import ApiError, conflict, invalid, rate_limited
from contentnode.http.response import json_response, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, nullable, obj, one_of, text


def _secure(req) -> bool:
    return req.scheme == "https"


def _any_admin(users: dict) -> bool:
    return any(u["role"] == "admin" for u in users.values())


def session_user(req) -> dict:
    """The user object of this session. A token session acts with the token's scopes (intersected
    with the owner's); it shows the owner's role, and those scopes as the ones it holds."""
    shown = public_user(req.user)
    if req.api_token is not None:
        owner = req.app.store.data["users"].get(req.user["id"])
        shown["role"] = owner["role"] if owner else shown["role"]
    return shown


def token_summary(req) -> dict | None:
    """{"id", "name"} of the API token this session logged in with; None for a password login."""
    return {"id": req.api_token["id"], "name": req.api_token["name"]} if req.api_token else None


def get_session(req):
    users = req.app.store.data["users"]
    policy = req.app.store.data["policy"]
    return {
        "authenticated": req.user is not None,
        "setup_required": not _any_admin(users),
        "two_factor_policy": policy["two_factor"],
        "passkeys_policy": effective(policy)["passkeys"],
        "two_factor_pending": req.pending_session is not None,
        "two_factor_enrollment_required": bool(req.user and req.app.sessions.must_enrol(req.user, req.api_token)),
        "user": session_user(req) if req.user else None,
        "token": token_summary(req),
        # shown on the sign-in page before any login, so a person can tell nodes apart: a label the
        # administrator chose (settings node_name), never a secret (docs/API.md says so)
        "node_name": req.app.store.data["settings"].get("node_name", "contentnode"),
    }


def checked_new_password(req, password, username: str, field: str = "password") -> str:
    """The password if the policy accepts it; a 400 naming the problem otherwise."""
    problem = password_problem(password, username, req.app.store.data["policy"]["password_min_length"])
    if problem:
        raise invalid(problem, field)
    return password


def setup(req):
    body = req.body
    username = new_username(body)
    password = checked_new_password(req, body.get("password"), username)
    if _any_admin(req.app.store.data["users"]):
        raise conflict("setup_done", "the first administrator already exists; log in instead")
    password_hash = req.app.hasher.hash(password)
    with req.app.store.transaction() as doc:
        if _any_admin(doc["users"]):
            raise conflict("setup_done", "the first administrator already exists; log in instead")
        user = new_user(username, password_hash, "admin", req.app.clock.now())
        user["last_login_at"] = req.app.clock.now()
        user["known_addresses"] = [req.client_ip]
        doc["users"][user["id"]] = user
    req.user = user
    req.audit("setup", target=username)
    token, _ = req.app.sessions.create(user["id"], req.client_ip, req.user_agent)
    return json_response({"user": public_user(user)}, 201, _cookie(req, token))


def _cookie(req, token: str, max_age: int | None = None) -> dict:
    age = req.app.sessions.max_age() if max_age is None else max_age
    return {"Set-Cookie": cookie_header(token, _secure(req), age)}


def account_label(req, username: str) -> str:
    """How a typed username appears in limiter keys, audit entries and alerts.

    An existing account by its (lower-case) name; anything else by a keyed digest
    such as "unknown-3f9a0c1b2d4e": a password typed into the username field must
    not be stored verbatim, nor phishing text reach the operator's alerts, yet
    repeated tries of the same unknown name still share one label.
    """
    name = username.strip().lower()
    if find_by_username(req.app.store.data["users"], name) is not None:
        return name
    secret = req.app.store.data["node"]["secret"].encode()
    return "unknown-" + hmac.new(secret, name.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:12]


def limiter_keys(req, username: str) -> tuple:
    return address_key(req.client_ip), password_key(account_label(req, username))


def check_rate_limit(req, keys) -> None:
    """429 when a key is locked; else this attempt is counted now, as if it failed.

    The count happens before the password or code is checked, so attempts sent
    together cannot all get past the limit; `attempt_succeeded` gives it back.
    """
    now = req.app.clock.now()
    limiter = req.app.login_limiter
    wait = limiter.reserve(keys, now)
    if wait > 0:
        locked = next(k for k in reversed(keys) if limiter.retry_after(k, now) > 0)
        req.app.audit.record_repeating(f"login.locked:{locked}", "login.locked", target=locked,
                                       ip=req.client_ip, user_agent=req.user_agent)
        req.app.metrics.logins.inc("locked")
        raise rate_limited(wait + 0.999, "too many failed attempts; try again later")
    req.attempt = (tuple(keys), now)


def attempt_succeeded(req) -> None:
    """The attempt counted by check_rate_limit was no failure: give it back."""
    attempt = getattr(req, "attempt", None)
    if attempt is not None:
        req.app.login_limiter.release(*attempt)
        req.attempt = None


def count_failure(req, keys, username: str, action: str = "login.failure", detail=None) -> None:
    """Record a failed attempt (counted on every key); a key reaching the threshold is a lockout."""
    now = req.app.clock.now()
    limiter = req.app.login_limiter
    label = keys[-1].partition(":")[2]
    req.audit(action, target=username.strip() if label == username.strip().lower() else label, ok=False,
              detail=detail)
    req.app.metrics.logins.inc("failure")
    attempt = getattr(req, "attempt", None)
    counted_at = attempt[1] if attempt is not None and attempt[0] == tuple(keys) else None
    req.attempt = None
    for key in keys:
        failures = limiter.position(key, counted_at) if counted_at is not None else limiter.fail(key, now)
        if failures == limiter.threshold_for(key):
            req.audit("login.lockout", target=key, ok=False)
            req.app.events.emit("login_failures_burst", key=key, ip=req.client_ip)


def password_attempt(req, username: str, password_hash, password: str, failure_action: str,
                     detail=None) -> bool:
    """Check a password under the login lockout: 429 while locked, a counted failure when wrong.

    Logins, 2FA changes and password changes all check passwords here, so a
    stolen session cannot guess the password faster anywhere than at login.
    """
    keys = limiter_keys(req, username)
    check_rate_limit(req, keys)
    if not req.app.hasher.verify(password_hash, password[:4096]):
        count_failure(req, keys, username, failure_action, detail)
        return False
    attempt_succeeded(req)
    return True


def confirm_password(req, body: dict, failure_action: str) -> None:
    """The caller's own password (2FA and passkey changes), counted like a login attempt when wrong."""
    password = body.get("password")
    if not isinstance(password, str) or not password:
        raise invalid("password is required", "password")
    if not password_attempt(req, req.user["username"], req.user["password_hash"], password, failure_action):
        raise invalid("the password is wrong", "password")


def two_factor_keys(req, username: str) -> tuple:
    """Limiter keys of a second login step: the address, and the account's own second-factor key."""
    return address_key(req.client_ip), second_factor_key(username)


def token_login(req, body: dict):
    """Exchange an API token for a session: no 2FA step, its own per-address limiter key.

    Wrong tokens count only on token_key(address), so guessing tokens never locks
    the owner's interactive login (nor an address's password logins).
    """
    v.only(body, {"token"})
    keys = (token_key(req.client_ip),)
    check_rate_limit(req, keys)
    now = req.app.clock.now()
    record = tokens.verify(req.app.store.data.get("api_tokens", {}), body.get("token"), now)
    user = req.app.store.data["users"].get(record["user_id"]) if record else None
    if record is None or user is None or user.get("disabled"):
        count_failure(req, keys, "", "login.token_failure")  # never the presented value: it may be a secret
        raise ApiError(401, "bad_credentials", "wrong, expired or revoked token")
    attempt_succeeded(req)
    if req.token:
        req.app.sessions.delete_token(req.token)
    token, _ = req.app.sessions.create(user["id"], req.client_ip, req.user_agent, api_token=record["id"])
    tokens.touch(req.app.store, record["id"], now)
    req.user, req.api_token = tokens.acting_user(record, user), record
    req.audit("login.token", target=user["username"])
    req.app.metrics.logins.inc("success")
    shown = tokens.public_token(req.app.store.data["api_tokens"][record["id"]])
    return json_response({"user": session_user(req), "token": shown}, 200, _cookie(req, token))


def login(req):
    body = v.require_object(req.body)
    if "token" in body:
        return token_login(req, body)
    v.only(body, {"username", "password"})
    # any text is a wrong username here (401, audited as a digest), never a 400 telling names apart
    username = v.text(body, "username", max_len=200, single_line=False)
    password = body.get("password")
    if not isinstance(password, str) or not password:
        raise invalid("password is required", "password")
    user = find_by_username(req.app.store.data["users"], username)
    usable = user is not None and not user.get("disabled")  # a disabled account fails like a wrong password
    if not password_attempt(req, username, user["password_hash"] if usable else None, password, "login.failure"):
        raise ApiError(401, "bad_credentials", "wrong username or password")
    req.app.login_limiter.clear(password_key(username))
    methods = passkeys.second_factors(user, req.app.store.data["policy"])
    if methods:
        token, _ = req.app.sessions.create(user["id"], req.client_ip, req.user_agent, pending=True)
        req.user = user
        req.audit("login.password_ok", target=user["username"])
        return json_response({"two_factor_required": True, "two_factor_methods": methods}, 200,
                             _cookie(req, token, int(PENDING_LIFETIME)))
    return complete_login(req, user)


def complete_login(req, user: dict, method: str = "password"):
    """Every login step that succeeds ends here: a fresh token, last login, audit, events."""
    if req.token:
        req.app.sessions.delete_token(req.token)
    known = set(user.get("known_addresses") or ())
    with req.app.store.transaction() as doc:
        record = doc["users"][user["id"]]
        record["last_login_at"] = req.app.clock.now()
        if req.client_ip not in known:
            record["known_addresses"] = (list(known) + [req.client_ip])[-20:]
        user = record
    token, _ = req.app.sessions.create(user["id"], req.client_ip, req.user_agent)
    req.user = user
    req.audit("login.success", target=user["username"], detail={"method": method})
    req.app.metrics.logins.inc("success")
    if user["role"] == "admin" and known and req.client_ip not in known:
        req.app.events.emit("admin_login_new_address", username=user["username"], ip=req.client_ip)
    return json_response({"user": public_user(user)}, 200, _cookie(req, token))


def logout(req):
    if req.token:
        req.app.sessions.delete_token(req.token)
        if req.user:
            req.audit("logout", target=req.user["username"])
    return no_content({"Set-Cookie": clear_cookie_header(_secure(req))})


USER = answer({"id": STRING, "username": STRING, "role": one_of(*ROLES), "scopes": array(one_of(*SCOPES)),
               "two_factor": BOOLEAN, "disabled": BOOLEAN, "created_at": nullable(STRING),
               "last_login_at": nullable(STRING)})
TOKEN_SUMMARY = nullable(answer({"id": STRING, "name": STRING}))
SESSION = answer({"authenticated": BOOLEAN, "setup_required": BOOLEAN, "two_factor_policy": one_of(*TWO_FACTOR_MODES),
                  "passkeys_policy": one_of(*PASSKEY_MODES),
                  "two_factor_pending": BOOLEAN, "two_factor_enrollment_required": BOOLEAN,
                  "user": nullable(USER), "token": TOKEN_SUMMARY, "node_name": STRING})

# A new password's length floor is the policy's (password_min_length), checked by the handler.
NEW_PASSWORD = {"type": "string", "minLength": 1, "maxLength": PASSWORD_MAX_LENGTH}
USERNAME = text(64, pattern=f"^{USERNAME_PATTERN}$")
SETUP_BODY = obj({"username": USERNAME, "password": NEW_PASSWORD}, required=["username", "password"])
LOGIN_BODY = obj({"username": text(200), "password": {"type": "string", "minLength": 1}, "token": text(200)},
                 description='{"username", "password"}, or {"token"} to log in with an API token')

ROUTES = [
    Route("GET", "/api/session", "public", get_session, answer=SESSION),
    Route("POST", "/api/setup", "public", setup, status=201, body=SETUP_BODY,
          answer=answer({"user": USER})),
    Route("POST", "/api/login", "public", login, body=LOGIN_BODY),
    Route("POST", "/api/logout", "public", logout, status=204, body=obj({}), body_optional=True),
]
