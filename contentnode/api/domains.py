"""Domains: add, list, read, check, test, redirect, delete.

A domain is a host name this node serves. Its status tells whether the last
check proved the name reaches this node (verified), failed, or was never run
(pending). Redirects are answered by the public port for every request to the
host, after ACME challenges and the HTTPS upgrade.
"""

from urllib.parse import urlsplit

from contentnode.api import validate as v
from contentnode.clock import rfc3339
from contentnode.core import domaincheck, settings
from contentnode.core.hostnames import HostnameError, normalize_host, unicode_form
from contentnode.http.errors import conflict, invalid, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route

SECTIONS = {"domains": dict}

MAX_DOMAINS = 1000
REDIRECT_CODES = (301, 302, 307, 308)


def host_field(body, name="host") -> str:
    """The normalised host of a body field, or 400 naming the field."""
    value = body.get(name)
    if value is None:
        raise invalid(f"{name} is required", name)
    try:
        return normalize_host(value)
    except HostnameError as exc:
        raise invalid(f"{name}: {exc}", name) from None


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
    body = v.require_object(req.body)
    v.only(body, {"host"})
    host = host_field(body)
    stamp = rfc3339(req.app.clock.now())
    record = {"host": host, "status": "pending", "created_at": stamp, "updated_at": stamp,
              "last_check": None, "redirect": None, "certificate": None}
    with req.app.store.transaction() as doc:
        if host in doc["domains"]:
            raise conflict("conflict", f"domain {host} already exists", "host")
        if len(doc["domains"]) >= MAX_DOMAINS:
            raise conflict("conflict", f"a node serves at most {MAX_DOMAINS} domains", "host")
        doc["domains"][host] = record
    req.audit("domain.create", target=host)
    return created(public_view(record))


def rules_using(doc: dict, host: str) -> list:
    return sorted(rule_id for rule_id, rule in (doc.get("rules") or {}).items()
                  if isinstance(rule, dict) and rule.get("domain") == host)


def delete_domain(req):
    try:
        host = normalize_host(req.params["host"])
    except HostnameError:
        raise not_found("no such domain") from None
    with req.app.store.transaction() as doc:
        if host not in doc["domains"]:
            raise not_found(f"domain {host} is not configured")
        users = rules_using(doc, host)
        if users:
            raise conflict("in_use", f"domain {host} is used by rules {', '.join(users)}; delete them first")
        del doc["domains"][host]
    req.app.tls.certs.delete(host)
    req.audit("domain.delete", target=host)
    return no_content()


def check_target(app) -> tuple:
    """(scheme, port) the check uses: settings, else the public listener's own port."""
    effective = settings.effective(app.store.data)
    return effective["public_scheme"], effective["public_port"] or app.servers["public"].server_address[1]


def run_check(app, host: str) -> domaincheck.Steps:
    """Check host, record the outcome on its record, raise domain_check_failed on failure."""
    scheme, port = check_target(app)
    secret = bytes.fromhex(app.store.data["node"]["secret"])
    steps = domaincheck.check_domain(host, scheme, port, secret, app.outbound,
                                     dns_server=app.config.dns_resolver or None)
    stamp = rfc3339(app.clock.now())
    with app.store.transaction() as doc:
        record = doc["domains"].get(host)
        if record is not None:
            record["status"] = "verified" if steps.ok else "failed"
            record["last_check"] = {"ok": steps.ok, "at": stamp, "steps": steps.items}
            record["updated_at"] = stamp
    if not steps.ok:
        failed = next(step for step in steps.items if not step["ok"])
        app.events.emit("domain_check_failed", host=host, step=failed["name"], detail=failed["detail"])
    return steps


def check_domain(req):
    body = v.require_object(req.body)
    v.only(body, {"host"})
    host = host_field(body)
    existing(req, host)
    steps = run_check(req.app, host)
    req.audit("domain.check", target=host, ok=steps.ok)
    return {"host": host, "ok": steps.ok, "steps": steps.items}


def test_domain(req):
    body = v.require_object(req.body)
    v.only(body, {"host", "path"})
    host = host_field(body)
    path = v.text(body, "path", required=False, default="/", max_len=2000)
    if not path.startswith("/") or any(c in path for c in " \r\n\t#"):
        raise invalid("path must start with / and hold no spaces or fragment", "path")
    record = existing(req, host)
    https = req.app.tls.https_settings()
    if https["enabled"] and record.get("certificate"):
        url = f"https://{host}:{https['port']}{path}"
    else:
        scheme, port = check_target(req.app)
        url = f"{scheme}://{host}:{port}{path}"
    result = domaincheck.visit(url, host, req.app.outbound)
    req.audit("domain.test", target=host, ok=result["ok"])
    return dict(result, host=host)


def _redirect_target(body) -> str | None:
    to = body.get("to", ...)
    if to is ...:
        raise invalid("to is required (null clears the redirect)", "to")
    if to is None:
        return None
    try:
        return settings.http_url("to", to)
    except settings.SettingsError as exc:
        raise invalid(str(exc), "to") from None


def set_redirect(req):
    body = v.require_object(req.body)
    v.only(body, {"host", "to", "code", "keep_path"})
    host = host_field(body)
    to = _redirect_target(body)
    code = v.choice(body, "code", REDIRECT_CODES, default=301)
    keep_path = v.boolean(body, "keep_path", default=True)
    if to is not None and (urlsplit(to).hostname or "").rstrip(".").lower() == host:
        raise invalid("a domain cannot redirect to itself", "to")
    if to is not None and ("?" in to or "#" in to) and keep_path:
        raise invalid("to may only carry a query when keep_path is false", "to")
    with req.app.store.transaction() as doc:
        record = doc["domains"].get(host)
        if record is None:
            raise not_found(f"domain {host} is not configured")
        record["redirect"] = None if to is None else {"to": to, "code": code, "keep_path": keep_path}
        record["updated_at"] = rfc3339(req.app.clock.now())
    req.audit("domain.redirect", target=host, detail={"to": to, "code": code if to else None})
    return public_view(record)


def _panel_domains(req):
    return list_domains(req)["domains"]


PANEL_SECTIONS = [("domains", "domains:read", _panel_domains)]


ROUTES = [
    Route("GET", "/api/domains", "domains:read", list_domains),
    Route("POST", "/api/domains", "domains:write", add_domain),
    Route("POST", "/api/domains/check", "domains:write", check_domain),
    Route("POST", "/api/domains/test", "domains:write", test_domain),
    Route("POST", "/api/domains/redirect", "domains:write", set_redirect),
    Route("GET", "/api/domains/{host}", "domains:read", get_domain),
    Route("DELETE", "/api/domains/{host}", "domains:write", delete_domain),
]
