"""The fleet routes (settings:write): GET /api/fleet, POST /api/fleet/init,
/api/fleet/join-codes (mint, list, revoke), /api/fleet/join, /api/fleet/leave, DELETE
/api/fleet/nodes/{node_id}; and GET /api/fleet/role
for any signed-in user (docs/API.md, Fleet).

Answers never carry a key: the bucket shows without its credentials, the
recovery secret and join codes are shown once, in the answer that makes them.
"""

from contentnode.core import buckets
from contentnode.core import fleet_section
from contentnode.fleet import enrol, issuer
from contentnode.fleet.joincode import DEFAULT_SECONDS, MAX_SECONDS, MIN_SECONDS
from contentnode.fleet.wire import Refused
from contentnode.http.errors import ApiError
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, integer, nullable, obj, text

# Refusal code -> HTTP status; anything else a bundle or code refusal (400).
_STATUS = {"fleet_member": 409, "not_in_fleet": 409, "not_primary": 409, "fleet_exists": 409,
           "too_many_join_codes": 409, "is_primary": 409, "join_code_expired": 403, "join_code_used": 403, "join_code_revoked": 403,
           "not_found": 404, "bucket_unreachable": 502, "no_bundle": 502, "no_secrets": 500}


def _refusal(exc: Refused) -> ApiError:
    return ApiError(_STATUS.get(exc.code, 400), exc.code, exc.message, "code" if exc.code.endswith("join_code")
                    or exc.code.startswith("join_code_") else None)


def get_fleet(req):
    return req.app.fleet.view()


def get_role(req):
    """What every signed-in user's panel needs to say where edits are made: role and primary."""
    return {"role": req.app.fleet.state()["role"], "primary": req.app.fleet.primary_of_replica()}


def init(req):
    try:
        _, recovery = enrol.init(req.app.fleet, req.body)
    except Refused as exc:
        raise _refusal(exc) from None
    issuer.run_probe(req.app.fleet)  # whether the issuer may use a lease (GET /api/fleet shows it)
    answer_ = req.app.fleet.view()
    req.audit("fleet.init", target=answer_["fleet_id"], detail={"bucket": answer_["bucket"]})
    return dict(answer_, recovery_secret=recovery)


def join_code(req):
    body = req.body or {}
    expires_in = body.get("expires_in", DEFAULT_SECONDS)
    given = [name for name in REPLICA_KEYS if name in body]
    if given and len(given) != len(REPLICA_KEYS):
        missing = next(name for name in REPLICA_KEYS if name not in body)
        raise ApiError(400, "invalid", "replica_access_key and replica_secret_key go together", missing)
    credentials = tuple(body[name] for name in REPLICA_KEYS) if given else None
    try:
        code, join_id, expires_at = enrol.mint_join_code(req.app.fleet, expires_in, credentials)
    except Refused as exc:
        raise _refusal(exc) from None
    req.audit("fleet.join_code", target=join_id, detail={"expires_at": expires_at})
    return created({"id": join_id, "code": code, "expires_at": expires_at})


def list_join_codes(req):
    return {"join_codes": enrol.join_codes(req.app.fleet)}


def _delete(req, remove, param: str, action: str):
    """A DELETE of one fleet object named by the path: 204, audited; a refusal's answer else."""
    try:
        remove(req.app.fleet, req.params[param])
    except Refused as exc:
        raise _refusal(exc) from None
    req.audit(action, target=req.params[param])
    return no_content()


def revoke_join_code(req):
    return _delete(req, enrol.revoke_join_code, "id", "fleet.join_code_revoke")


def join(req):
    dry_run = req.body.get("dry_run", False)
    try:
        result = enrol.join(req.app.fleet, req.body["code"], dry_run)
    except Refused as exc:
        req.audit("fleet.join", ok=False, detail={"dry_run": dry_run, "error": exc.code})
        raise _refusal(exc) from None
    if not dry_run:
        req.audit("fleet.join", target=result["fleet_id"], detail={"primary": result["primary"]})
    return dict(result, role="replica" if not dry_run else req.app.fleet.state()["role"])


def remove_node(req):
    return _delete(req, enrol.remove_node, "node_id", "fleet.node_remove")


def leave(req):
    try:
        result = enrol.leave(req.app.fleet)
    except Refused as exc:
        raise _refusal(exc) from None
    req.audit("fleet.leave", target=result["left"], detail={"was": result["was"]})
    return result


_ROLE = fleet_section.FLEET.fields["role"].shape
INIT_BODY = obj({**{name: f.shape for name, f in buckets.KINDS["s3"].items()}, "prefix": text(enrol.PREFIX_MAX)},
                required=["endpoint", "region", "bucket", "access_key", "secret_key"])
REPLICA_KEYS = ("replica_access_key", "replica_secret_key")   # the joiner's own bucket credentials
JOIN_CODE_BODY = obj({"expires_in": integer(MIN_SECONDS, MAX_SECONDS),
                      "replica_access_key": buckets.KINDS["s3"]["access_key"].shape,
                      "replica_secret_key": buckets.KINDS["s3"]["secret_key"].shape})
JOIN_BODY = obj({"code": text(8192), "dry_run": BOOLEAN}, required=["code"])

_OBJECT_OR_NULL = {"type": ["object", "null"]}
FLEET = answer({"role": _ROLE, "node_id": STRING,
                "fleet_id": nullable(STRING), "seq": {"type": ["integer", "null"]},
                "bucket": _OBJECT_OR_NULL, "applied_at": nullable(STRING), "last_error": _OBJECT_OR_NULL,
                "poll_seconds": {"type": "integer"}, "key_epoch": {"type": ["integer", "null"]},
                "expires_at": nullable(STRING), "nodes": {"type": "array", "items": {"type": "object"}},
                "primary": _OBJECT_OR_NULL, "probe": _OBJECT_OR_NULL, "unknown_statuses": {"type": "integer"},
                "issuer": {"enum": ["lease", "primary_only", None]}, "demoted": _OBJECT_OR_NULL,
                "removed": _OBJECT_OR_NULL, "members": {"type": "integer"}})
COUNTS = {"type": "object"}
JOINED = answer({"fleet_id": STRING, "primary": STRING, "seq": {"type": "integer"}, "dry_run": BOOLEAN,
                 "replaces": COUNTS, "with": COUNTS, "cannot_take": nullable(STRING), "role": STRING})

ROUTES = [
    Route("GET", "/api/fleet", "settings:write", get_fleet, answer=FLEET),
    Route("GET", "/api/fleet/role", "login", get_role,
          answer=answer({"role": _ROLE, "primary": nullable(STRING)})),
    Route("POST", "/api/fleet/init", "settings:write", init, body=INIT_BODY, token_session=False,
          answer=dict(FLEET, properties=dict(FLEET["properties"], recovery_secret=STRING),
                      required=FLEET["required"] + ["recovery_secret"])),
    Route("POST", "/api/fleet/join-codes", "settings:write", join_code, status=201, body=JOIN_CODE_BODY,
          body_optional=True, token_session=False,
          answer=answer({"id": STRING, "code": STRING, "expires_at": STRING})),
    Route("GET", "/api/fleet/join-codes", "settings:write", list_join_codes, answer=answer({"join_codes": {
        "type": "array", "items": answer({"id": STRING, "created_at": nullable(STRING), "expires_at": STRING,
                                          "used_at": nullable(STRING), "used_by": nullable(STRING)})}})),
    Route("DELETE", "/api/fleet/join-codes/{id}", "settings:write", revoke_join_code, status=204),
    Route("DELETE", "/api/fleet/nodes/{node_id}", "settings:write", remove_node, status=204, fleet_shared=True),
    Route("POST", "/api/fleet/join", "settings:write", join, body=JOIN_BODY, answer=JOINED, token_session=False),
    Route("POST", "/api/fleet/leave", "settings:write", leave, body=obj({}), body_optional=True,
          answer=answer({"role": STRING, "left": nullable(STRING), "was": STRING})),
]
