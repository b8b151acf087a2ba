"""Routing rules (routes): which bucket answers a domain's paths.

Matching itself lives in core/rules (the content path builds its index from
the "rules" section). This module validates and stores rules: the domain and
the bucket must exist, the path is normalised and unique per domain.
"""

import secrets

from contentnode.core import fields as v
from contentnode.clock import rfc3339
from contentnode.core import revisions, rules
from contentnode.http.errors import conflict, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, obj

MAX_RULES = 20_000


def _unique_path(doc: dict, record: dict, own_id: str | None = None) -> None:
    other_id = rules.RULE.clash(doc["rules"], record, own_id)
    if other_id is not None:
        raise conflict("conflict", f"rule {other_id} already routes {record['path']} on {record['domain']}",
                       "path", refs=rules.rule_refs([other_id]))


def existing(doc: dict, rule_id: str) -> dict:
    record = doc["rules"].get(rule_id)
    if record is None:
        raise not_found(f"no rule with id {rule_id!r}")
    return record


def list_rules(req):
    """All rules, or those of one domain (?domain=), sorted by domain then path, and whether this
    node can take country lists (the panel's rule editor offers them only then)."""
    records = req.app.store.data["rules"].values()
    wanted = v.host_query(req.query)
    if wanted is not None:
        records = [r for r in records if r["domain"] == wanted]
    countries = req.app.countries
    return {"rules": sorted(records, key=lambda r: (r["domain"], r["path"])),
            "country_database": {"available": countries.available, "missing": countries.missing}}


def get_rule(req):
    return existing(req.app.store.data, req.params["id"])


def create_rule(req):
    body = req.body
    stamp = rfc3339(req.app.clock.now())
    with req.app.store.transaction() as doc:
        if len(doc["rules"]) >= MAX_RULES:
            raise conflict("conflict", f"a node holds at most {MAX_RULES} rules")
        fields = rules.record_fields(body, doc, partial=False, countries=req.app.countries)
        record = {"id": secrets.token_hex(6), **rules.create_defaults(doc, fields["bucket"]), **fields,
                  "created_at": stamp, "updated_at": stamp}
        _unique_path(doc, record)
        doc["rules"][record["id"]] = record
    req.audit("rule.create", target=record["id"], detail=_summary(record))
    return created(record)


def update_rule(req):
    body = req.body
    rule_id = req.params["id"]
    with req.app.store.transaction() as doc:
        record = existing(doc, rule_id)
        revisions.require(f"rule {rule_id}", revisions.of(record), req.if_match)
        changes = rules.record_fields(body, doc, partial=True, countries=req.app.countries)
        before = dict(record)
        record.update(changes)
        _unique_path(doc, record, rule_id)
        revisions.stamp_if_changed(record, before, rfc3339(req.app.clock.now()))
    req.audit("rule.update", target=rule_id, detail={**_summary(record), "fields": sorted(changes)})
    return record


def delete_rule(req):
    rule_id = req.params["id"]
    with req.app.store.transaction() as doc:
        record = existing(doc, rule_id)
        revisions.require(f"rule {rule_id}", revisions.of(record), req.if_match)
        del doc["rules"][rule_id]
    req.audit("rule.delete", target=rule_id, detail=_summary(record))
    return no_content()


def _summary(record: dict) -> dict:
    return {"domain": record["domain"], "path": record["path"], "bucket": record["bucket"]}


def _panel_rules(req):
    return list_rules(req)["rules"]


PANEL_SECTIONS = [("rules", "routes:read", _panel_rules)]

CREATE_BODY = rules.RULE.body(create=True)
UPDATE_BODY = rules.RULE.body(create=False)
RULE = rules.RULE.answer({"id": STRING, "created_at": STRING, "updated_at": STRING},
                         optional=("created_at", "updated_at"))

COUNTRY_DATABASE = obj({"available": BOOLEAN, "missing": {"type": ["string", "null"]}},
                       required=("available", "missing"),
                       description="whether access.countries can be saved here, and if not, what the node lacks")

ROUTES = [
    Route("GET", "/api/rules", "routes:read", list_rules, query=frozenset({"domain"}),
          answer=answer({"rules": {"type": "array", "items": RULE}, "country_database": COUNTRY_DATABASE})),
    Route("POST", "/api/rules", "routes:write", create_rule, status=201, body=CREATE_BODY, answer=RULE,
          fleet_shared=True),
    Route("GET", "/api/rules/{id}", "routes:read", get_rule, answer=RULE),
    Route("PUT", "/api/rules/{id}", "routes:write", update_rule, body=UPDATE_BODY, answer=RULE, if_match=True,
          fleet_shared=True),
    Route("DELETE", "/api/rules/{id}", "routes:write", delete_rule, status=204, if_match=True,
          fleet_shared=True),
]
