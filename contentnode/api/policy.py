"""GET/PUT /api/policy (users:manage): 2FA requirement, password length, session and lockout limits.

A PUT is a partial update checked as a whole (the idle timeout may not
exceed the absolute one); lockout limits apply at once through
req.app.apply_policy() (api/context.py), session limits on the next request.
"""

from contentnode.core import fields as v
from contentnode.core import revisions
from contentnode.auth.policy import LIMITS, PASSKEY_MODES, TWO_FACTOR_MODES, checked_policy, effective
from contentnode.http.router import Route
from contentnode.http.schema import answer, integer, obj, one_of


def view(doc) -> dict:
    """The policy object the API answers: every limit and the revision."""
    return dict(effective(doc["policy"]), revision=revisions.of_section(doc, "policy"))


def get_policy(req):
    return view(req.app.store.data)


def put_policy(req):
    body = v.require_object(req.body)
    with req.app.store.transaction() as doc:
        revisions.require("the policy", revisions.of_section(doc, "policy"), req.if_match)
        current = effective(doc["policy"])
        wanted = checked_policy(body, current)
        doc["policy"] = wanted
    req.app.apply_policy()
    # A list of {"field","from","to"}: the audit scrubber would drop a member named password_*.
    changes = [{"field": k, "from": current[k], "to": wanted[k]} for k in wanted if current[k] != wanted[k]]
    req.audit("policy.update", detail={"changes": changes})
    return view(doc)


_POLICY = {"two_factor": one_of(*TWO_FACTOR_MODES), "passkeys": one_of(*PASSKEY_MODES), **{name: integer(lo, hi) for name, (lo, hi) in LIMITS.items()}}
POLICY_BODY = obj(_POLICY, description="a partial update, checked as a whole")
POLICY = answer(_POLICY)

ROUTES = [
    Route("GET", "/api/policy", "users:manage", get_policy, answer=POLICY),
    Route("PUT", "/api/policy", "users:manage", put_policy, body=POLICY_BODY, answer=POLICY, if_match=True,
          token_session=False),
]
