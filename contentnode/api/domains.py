"""Domains: add, list, read, check, test, redirect, update (access, error pages), delete.

A domain is a host name this node serves. Its status tells whether the last
check proved the name reaches this node (verified), failed, or was never run
(pending). Redirects are answered by the public port for every request to the
host, after ACME challenges and the HTTPS upgrade.
"""

from contentnode.core import fields as v
from contentnode.clock import rfc3339
from contentnode.core import domaincheck, domains, edge_rules, revisions, rules
from contentnode.core.hostnames import HostnameError, normalize_host, unicode_form
from contentnode.http.errors import conflict, invalid, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, listing, nullable, obj, one_of, text


MAX_DOMAINS = 1000


def existing(req, host: str) -> dict:
    """The stored record of host, or 404."""
    record = req.app.store.data["domains"].get(host)
    if record is None:
        raise not_found(f"domain {host} is not configured")
    return record


def public_view(record: dict) -> dict:
    return dict(record, display=unicode_form(record["host"]))


def list_domains(req):
    return {"domains": [public_view(d) for d in sorted(req.app.store.data["domains"].values(),
                                                          key=lambda d: d["host"])]}


def get_domain(req):
    try:
        host = normalize_host(req.params["host"])
    except HostnameError:
        raise not_found("no such domain") from None
    return public_view(existing(req, host))


def add_domain(req):
    body = req.body
    host = v.host(body)
    stamp = rfc3339(req.app.clock.now())
    record = {"host": host, **domains.DOMAIN.defaults(), "created_at": stamp, "updated_at": stamp}
    with req.app.store.transaction() as doc:
        if host in doc["domains"]:
            raise conflict("conflict", f"domain {host} already exists", "host", refs=[{"type": "domain", "id": host}])
        if len(doc["domains"]) >= MAX_DOMAINS:
            raise conflict("conflict", f"a node serves at most {MAX_DOMAINS} domains", "host")
        doc["domains"][host] = record
    req.audit("domain.create", target=host)
    return created(public_view(record))


def delete_domain(req):
    try:
        host = normalize_host(req.params["host"])
    except HostnameError:
        raise not_found("no such domain") from None
    with req.app.store.transaction() as doc:
        if host not in doc["domains"]:
            raise not_found(f"domain {host} is not configured")
        revisions.require(f"domain {host}", revisions.of(doc["domains"][host]), req.if_match)
        users = rules.rules_using(doc, "domain", host)
        if users:
            raise conflict("in_use", f"domain {host} is used by rules {', '.join(users)}; delete them first",
                           refs=rules.rule_refs(users))
        del doc["domains"][host]
    req.app.tls.certs.delete(host)
    req.audit("domain.delete", target=host)
    return no_content()


def check_domain(req):
    body = req.body
    host = v.host(body)
    existing(req, host)
    steps = req.app.domain_checks.run(host)
    req.audit("domain.check", target=host, ok=steps.ok)
    return {"host": host, "ok": steps.ok, "steps": steps.items}


def test_domain(req):
    body = req.body
    host = v.host(body)
    path = v.text(body, "path", required=False, default="/", max_len=2000)
    if not path.startswith("/") or any(c in path for c in " \r\n\t#"):
        raise invalid("path must start with / and hold no spaces or fragment", "path")
    record = existing(req, host)
    https = req.app.tls.https_settings()
    if https["enabled"] and record["certificate"]:
        url = f"https://{host}:{https['port']}{path}"
    else:
        scheme, port = req.app.domain_checks.target()
        url = f"{scheme}://{host}:{port}{path}"
    result = domaincheck.visit(url, host, req.app.outbound())
    req.audit("domain.test", target=host, ok=result["ok"])
    return dict(result, host=host)


def _changed(req, host: str, changes: dict) -> dict:
    """The domain's record with `changes` applied under the request's If-Match (404 when not configured)."""
    with req.app.store.transaction() as doc:
        record = doc["domains"].get(host)
        if record is None:
            raise not_found(f"domain {host} is not configured")
        revisions.require(f"domain {host}", revisions.of(record), req.if_match)
        before = dict(record)
        record.update(changes)
        revisions.stamp_if_changed(record, before, rfc3339(req.app.clock.now()))
    return record


def set_redirect(req):
    body = req.body
    host = v.host(body)
    redirect = domains.redirect_rule(body, host)
    record = _changed(req, host, {"redirect": redirect})
    req.audit("domain.redirect", target=host, detail={"to": redirect and redirect["to"],
                                                      "code": redirect and redirect["code"]})
    return public_view(record)


def update_domain(req):
    """PUT /api/domains/{host}: the domain's `access` and `error_pages` (each optional, null clears it)."""
    try:
        host = normalize_host(req.params["host"])
    except HostnameError:
        raise not_found("no such domain") from None
    changes = domains.DOMAIN.read(req.body, partial=True, names=domains.EDGE_MEMBERS)
    edge_rules.countries_readable(changes.get("access"), req.app.countries)
    record = _changed(req, host, changes)
    req.audit("domain.update", target=host, detail={"fields": sorted(changes)})
    return public_view(record)


def _panel_domains(req):
    return list_domains(req)["domains"]


PANEL_SECTIONS = [("domains", "domains:read", _panel_domains)]


HOST = domains.DOMAIN.fields["host"].shape
HOST_BODY = domains.DOMAIN.body(create=True)
TEST_BODY = obj({"host": HOST, "path": text(2000)}, required=["host"])
REDIRECT_BODY = obj({"host": HOST, "to": nullable(text(2048)), "code": one_of(*domains.REDIRECT_CODES),
                     "keep_path": BOOLEAN}, required=["host", "to"], description="to: null clears the redirect")

UPDATE_BODY = obj({name: domains.DOMAIN.fields[name].shape for name in domains.EDGE_MEMBERS},
                  description="the members to change; null clears one")

DOMAIN = domains.DOMAIN.answer({"display": STRING, "created_at": STRING, "updated_at": STRING},
                                optional=("created_at", "updated_at"))

ROUTES = [
    Route("GET", "/api/domains", "domains:read", list_domains, answer=listing("domains", DOMAIN)),
    Route("POST", "/api/domains", "domains:write", add_domain, status=201, body=HOST_BODY, answer=DOMAIN,
          fleet_shared=True),
    Route("POST", "/api/domains/check", "domains:write", check_domain, body=HOST_BODY,
          fleet_shared=True),
    Route("POST", "/api/domains/test", "domains:write", test_domain, body=TEST_BODY),
    Route("POST", "/api/domains/redirect", "domains:write", set_redirect, body=REDIRECT_BODY, answer=DOMAIN, if_match=True,
          fleet_shared=True),
    Route("GET", "/api/domains/{host}", "domains:read", get_domain, answer=DOMAIN),
    Route("PUT", "/api/domains/{host}", "domains:write", update_domain, body=UPDATE_BODY, answer=DOMAIN,
          if_match=True, fleet_shared=True),
    Route("DELETE", "/api/domains/{host}", "domains:write", delete_domain, status=204, if_match=True,
          fleet_shared=True),
]
