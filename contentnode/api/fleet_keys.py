"""The fleet's keys and issuer (settings:write): POST /api/fleet/promote, /api/fleet/rotate-key,
/api/fleet/probe (docs/API.md, Fleet: promotion, key rotation, the issuer).

Promotion takes the recovery secret and answers the next one, once; every
attempt, refused or not, is audited (never with the secret).
"""

from contentnode.api.fleet import FLEET
from contentnode.fleet import issuer, promotion
from contentnode.fleet.wire import Refused
from contentnode.http.errors import ApiError
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, obj, text

# Refusal code -> status: the node's role or state is wrong (409), the secret is not
# accepted (403), the bucket or what it holds failed (502), the node's own files (500).
_STATUS = {"not_in_fleet": 409, "not_primary": 409, "not_replica": 409, "never_applied": 409, "promotion_lost": 409,
           "bad_recovery_secret": 403, "recovery_secret_used": 403,
           "bucket_unreachable": 502, "no_bundle": 502, "malformed": 502, "other_fleet": 502,
           "wrong_key_epoch": 502, "bad_signature": 502, "no_secrets": 500}


def _fail(exc: Refused) -> ApiError:
    return ApiError(_STATUS.get(exc.code, 400), exc.code, exc.message,
                    "recovery_secret" if exc.code.endswith("recovery_secret") else None)


def promote(req):
    fleet = req.app.fleet
    try:
        promotion.check_promotable(fleet.state())  # before the probe writes to the bucket
        probe = fleet.state().get("probe") or issuer.run_probe(fleet)  # a replica never probed: now
        secret = promotion.promote(fleet, req.body["recovery_secret"], bool(probe.get("conditional_writes")))
    except Refused as exc:
        req.audit("fleet.promote", ok=False, detail={"error": exc.code})
        raise _fail(exc) from None
    out = fleet.view()
    req.audit("fleet.promote", target=out["fleet_id"], detail={"key_epoch": out["key_epoch"]})
    return dict(out, recovery_secret=secret)


def rotate_key(req):
    try:
        epoch = promotion.rotate_key(req.app.fleet)
    except Refused as exc:
        req.audit("fleet.rotate_key", ok=False, detail={"error": exc.code})
        raise _fail(exc) from None
    req.audit("fleet.rotate_key", target=req.app.fleet.state().get("fleet_id"), detail={"key_epoch": epoch})
    return req.app.fleet.view()


def run_probe(req):
    try:
        result = issuer.run_probe(req.app.fleet)
    except Refused as exc:
        raise _fail(exc) from None
    req.audit("fleet.probe", detail={"conditional_writes": result["conditional_writes"]})
    return result


PROBE = answer({"conditional_writes": BOOLEAN, "checks": {"type": "array", "items": {"type": "object"}},
                "probed_at": STRING})
WITH_SECRET = dict(FLEET, properties=dict(FLEET["properties"], recovery_secret=STRING),
                   required=FLEET["required"] + ["recovery_secret"])

ROUTES = [
    Route("POST", "/api/fleet/promote", "settings:write", promote, token_session=False,
          body=obj({"recovery_secret": text(200)}, required=["recovery_secret"]), answer=WITH_SECRET),
    Route("POST", "/api/fleet/rotate-key", "settings:write", rotate_key, body=obj({}), body_optional=True,
          answer=FLEET),
    Route("POST", "/api/fleet/probe", "settings:write", run_probe, body=obj({}), body_optional=True, answer=PROBE),
]
