"""GET/PUT /api/policy (users:manage): 2FA requirement, password length, session and lockout limits.

A PUT is a partial update checked as a whole (the idle timeout may not
exceed the absolute one); lockout limits apply at once through
app.apply_policy(), session limits on the next request.
"""

from contentnode.core import fields as v
from contentnode.auth.policy import DEFAULT_POLICY, TWO_FACTOR_MODES
from contentnode.http.errors import invalid
from contentnode.http.router import Route

DAY = 86400
LIMITS = {
    "password_min_length": (8, 128),
    "session_idle_timeout": (60, 30 * DAY),
    "session_absolute_timeout": (300, 365 * DAY),
    "lockout_threshold": (1, 100),
    "lockout_duration": (10, 7 * DAY),
}


def get_policy(req):
    return dict(req.app.store.data["policy"])


def put_policy(req):
    body = v.require_object(req.body)
    v.only(body, DEFAULT_POLICY)
    current = req.app.store.data["policy"]
    wanted = dict(current)
    wanted["two_factor"] = v.choice(body, "two_factor", TWO_FACTOR_MODES, default=current["two_factor"])
    for name, (lo, hi) in LIMITS.items():
        wanted[name] = v.integer(body, name, lo, hi, default=current[name])
    if wanted["session_idle_timeout"] > wanted["session_absolute_timeout"]:
        field = "session_idle_timeout" if "session_idle_timeout" in body else "session_absolute_timeout"
        raise invalid("session_idle_timeout must not exceed session_absolute_timeout", field)
    with req.app.store.transaction() as doc:
        doc["policy"] = wanted
    req.app.apply_policy()
    # A list of {"field","from","to"}: the audit scrubber would drop a member named password_*.
    changes = [{"field": k, "from": current[k], "to": wanted[k]} for k in wanted if current[k] != wanted[k]]
    req.audit("policy.update", detail={"changes": changes})
    return dict(wanted)


ROUTES = [
    Route("GET", "/api/policy", "users:manage", get_policy),
    Route("PUT", "/api/policy", "users:manage", put_policy),
]
