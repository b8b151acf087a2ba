"""Configuration as code: GET /api/config and POST /api/config/apply (docs/API.md, "Configuration as code").

GET answers the node-wide config revision and the document (core/config_doc.py)
with secrets left out. Apply takes a whole document and If-Match of that
revision and makes the node match it in one store transaction, or changes
nothing: a bad record (400), an edit since the revision (412). Each section
the document gives needs its own write scope, the one its own API route needs;
reading needs each read scope. A change of the policy is refused to a session
opened with an API token, as PUT /api/policy refuses it.
"""

import secrets

from contentnode.api import buckets as bucket_api
from contentnode.api import settings as settings_api
from contentnode.api.buckets import MAX_BUCKETS
from contentnode.api.domains import MAX_DOMAINS
from contentnode.api.rules import MAX_RULES
from contentnode.auth import policy, scopes
from contentnode.clock import rfc3339
from contentnode.core import config_doc, config_whole, revisions
from contentnode.http.errors import ApiError
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, integer, obj

REVISION = "config"
# The scope of each section is the one its own routes need (GET/PUT /api/settings, /api/notifications, /api/policy).
_OWN = {"settings": "settings:write", "notifications": "notifications:manage", "policy": "users:manage"}
READ = {"domains": "domains:read", "buckets": "buckets:read", "rules": "routes:read", **_OWN}
WRITE = {"domains": "domains:write", "buckets": "buckets:write", "rules": "routes:write", **_OWN}
LIMITS = {"domains": MAX_DOMAINS, "buckets": MAX_BUCKETS, "rules": MAX_RULES}


class _DryRun(Exception):
    """Rolls a dry run's transaction back once the document passed every check; carries the document
    the node would then hold (what `contentnode config plan` compares with the current one)."""


def _need(req, wanted) -> None:
    missing = [scope for scope in wanted if not scopes.allows(req.user, scope)]
    if missing:
        raise ApiError(403, "forbidden", f"this needs the {', '.join(missing)} scope"
                                         f"{'s' if len(missing) > 1 else ''}")


def _wholes(app) -> dict:
    return {"settings": config_whole.SETTINGS, "notifications": config_whole.notifications(app.outbound()),
            "policy": policy.SECTION}


def get_config(req):
    _need(req, READ.values())
    doc = req.app.store.data
    return {"revision": revisions.of_section(doc, REVISION), "document": config_doc.current(doc, _wholes(req.app))}


def _after(app, counts: dict, before: dict) -> None:
    """What a change of settings or policy takes effect through at once, as their own PUTs do;
    `before` is the settings before the apply (a log level set at start stays unless this changed it)."""
    if counts["settings"]["changed"]:
        changed = settings_api.current(app)["log_level"] != before["log_level"]
        settings_api.apply_log_level(app.store, app.config, changed=changed)
        app.delivery.sync_settings()
    if counts["policy"]["changed"]:
        app.apply_policy()


def apply_config(req):
    document, dry_run = req.body["document"], req.body.get("dry_run", False)
    _need(req, [WRITE[name] for name in config_doc.SECTIONS if name in document])
    applier, wholes, before = None, _wholes(req.app), settings_api.current(req.app)
    try:
        with req.app.store.transaction() as doc:
            revisions.require("the configuration", revisions.of_section(doc, REVISION), req.if_match)
            applier = config_doc.Applier(doc, rfc3339(req.app.clock.now()), lambda: secrets.token_hex(6),
                                         req.app.folder_roots, lambda record: bucket_api.guard(req.app, record),
                                         LIMITS, wholes, countries=req.app.countries)
            applier.apply(document)
            if dry_run:
                raise _DryRun(config_doc.current(doc, wholes))
            if req.api_token is not None and applier.counts["policy"]["changed"]:
                raise ApiError(403, "forbidden", "the document changes the policy, which a session opened with an "
                                                 "API token cannot change (as PUT /api/policy): apply it logged in "
                                                 "with a password, or leave the policy section out")
    except _DryRun as outcome:
        result = outcome.args[0]
    if not dry_run:
        for host in applier.deleted_hosts:
            req.app.tls.certs.delete(host)
        _after(req.app, applier.counts, before)
        req.audit("config.apply", detail=applier.counts)
        result = config_doc.current(req.app.store.data, wholes)
    return {"revision": revisions.of_section(req.app.store.data, REVISION), "dry_run": dry_run,
            "changes": applier.counts, "secrets_changed": applier.secrets_changed, "document": result}


COUNTS = answer({"created": integer(0, 1_000_000), "changed": integer(0, 1_000_000), "deleted": integer(0, 1_000_000)})
APPLY_BODY = obj({"document": {"type": "object", "description": f"the sections {', '.join(config_doc.SECTIONS)}; "
                                                                 "one left out is left as is"},
                  "dry_run": BOOLEAN}, required=["document"])

ROUTES = [
    Route("GET", "/api/config", "login", get_config,
          answer=answer({"revision": integer(1, 2**53), "document": {"type": "object"}})),
    Route("POST", "/api/config/apply", "login", apply_config, body=APPLY_BODY, if_match=True, fleet_shared=True,
          answer=answer({"revision": integer(1, 2**53), "dry_run": BOOLEAN,
                         "changes": answer({name: COUNTS for name in config_doc.SECTIONS}),
                         "secrets_changed": array(STRING),
                         "document": {"type": "object"}})),
]
