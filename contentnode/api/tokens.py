"""API tokens (docs/API.md, "API tokens"): a user's own under /api/me/tokens, anyone's for users:manage.

The rules (secret format, hashing, scope subset, expiry) live in auth/tokens.py;
this module only maps requests onto them. Exchanging a token for a session is
POST /api/login {"token"} (api/login.py).
"""

from contentnode.api.login import password_attempt
from contentnode.api.users import MANAGE, user_in_path
from contentnode.auth import tokens
from contentnode.auth.scopes import SCOPES
from contentnode.http.errors import ApiError, invalid, not_found
from contentnode.http.response import json_response, no_content
from contentnode.http.router import Route
from contentnode.http.schema import STRING, answer, array, integer, listing, nullable, obj, one_of, refused, text



def create_token(req):
    """Needs the password again: a stolen session alone cannot mint a lasting credential."""
    body = req.body
    password = body.get("password")
    if not isinstance(password, str) or not password:
        raise invalid("password is required", "password")
    if not password_attempt(req, req.user["username"], req.user["password_hash"], password, "token.create",
                            {"reason": "wrong password"}):
        raise invalid("the password is wrong", "password")
    try:
        with req.app.store.transaction() as doc:
            record, secret = tokens.mint(doc, doc["users"][req.user["id"]], body.get("name"), body.get("scopes"),
                                         body.get("expires_in"), req.app.clock.now())
    except tokens.TokenError as exc:
        raise ApiError(exc.status, exc.code, str(exc), exc.field) from None
    req.audit("token.create", target=req.user["username"], detail={"id": record["id"], "name": record["name"]})
    return json_response({"token": tokens.public_token(record), "secret": secret}, 201)


def _revoke(req, user: dict, token_id: str):
    with req.app.store.transaction() as doc:
        record = doc.get("api_tokens", {}).get(token_id)
        if record is None or record["user_id"] != user["id"]:
            raise not_found("no such token")
        del doc["api_tokens"][token_id]
    req.audit("token.revoke", target=user["username"], detail={"id": token_id, "name": record["name"]})
    return no_content()


def list_own(req):
    return {"tokens": tokens.for_user(req.app.store.data.get("api_tokens", {}), req.user["id"])}


def revoke_own(req):
    return _revoke(req, req.user, req.params["id"])


def list_users_tokens(req):
    return {"tokens": tokens.for_user(req.app.store.data.get("api_tokens", {}), user_in_path(req)["id"])}


def revoke_users_token(req):
    return _revoke(req, user_in_path(req), req.params["token_id"])


CREATE_BODY = obj({"name": text(tokens.NAME_MAX), "scopes": array(one_of(*SCOPES), min_items=1),
                   "expires_in": nullable(integer(tokens.EXPIRES_IN_MIN, tokens.EXPIRES_IN_MAX)),
                   "password": {"type": "string", "minLength": 1}},
                  required=["name", "scopes", "password"],
                  description="scopes: a subset of your own; expires_in: seconds, null for never")

TOKEN = answer({"id": STRING, "name": STRING, "scopes": array(one_of(*SCOPES)), "created_at": STRING,
                "expires_at": nullable(STRING), "last_used_at": nullable(STRING), "hash": refused("is never shown")},
               optional=("hash",))
TOKENS = listing("tokens", TOKEN)

ROUTES = [
    Route("GET", "/api/me/tokens", "login", list_own, answer=TOKENS, token_session=False),
    Route("POST", "/api/me/tokens", "login", create_token, status=201, body=CREATE_BODY,
          answer=answer({"token": TOKEN, "secret": {"type": "string", "pattern": "^cn_[0-9a-f]+_[0-9a-f]{64}$"}}),
          token_session=False),
    Route("DELETE", "/api/me/tokens/{id}", "login", revoke_own, token_session=False),
    Route("GET", "/api/users/{id}/tokens", MANAGE, list_users_tokens, answer=TOKENS, token_session=False),
    Route("DELETE", "/api/users/{id}/tokens/{token_id}", MANAGE, revoke_users_token, token_session=False),
]
