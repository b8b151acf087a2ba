"""Node settings (settings:write): GET/PUT /api/settings, PUT /api/admin-host,
PUT /api/admin-allow. Every answer is the whole settings object."""

import logging

from contentnode.core import settings as st
from contentnode.http.errors import conflict, invalid
from contentnode.http.router import Route


def current(app) -> dict:
    return st.effective(app.store.data)


def store_settings(req, changes: dict, action: str) -> dict:
    """Write changed keys durably, audit which keys changed (values may be addresses, never secrets)."""
    with req.app.store.transaction() as doc:
        doc.setdefault("settings", {}).update(changes)
    req.audit(action, detail={"changed": sorted(changes)})
    return current(req.app)


def apply_log_level(app, changed: bool = False) -> None:
    """The stored log level stands in for the default at start; a start-up value (config file,
    environment, flag) beats it. A PUT that changes it applies at once, until the next start."""
    level = app.store.data.get("settings", {}).get("log_level")
    if level and (changed or app.config.sources.get("log_level") == "default"):
        logging.getLogger().setLevel(level.upper())


def get_settings(req):
    return current(req.app)


def put_settings(req):
    changes = st.validate(req.body)
    if not changes:
        raise invalid("no setting given")
    answer = store_settings(req, changes, "settings.update")
    apply_log_level(req.app, changed="log_level" in changes)
    return answer


def _valid_certificate(app, host: str) -> bool:
    leaf = app.tls.certs.leaf(host)
    return leaf is not None and leaf.not_valid_after_utc.timestamp() > app.clock.now()


def put_admin_host(req):
    body = req.body if isinstance(req.body, dict) else None
    if body is None or set(body) != {"host"}:
        raise invalid('the body must be {"host": "<name>"} or {"host": null}', "host")
    host = body["host"]
    if host is not None:
        host = st.hostname("host", host)
        if not _valid_certificate(req.app, host):
            raise invalid(f"no valid certificate for {host}: issue or upload one first "
                          "(the admin host is served over HTTPS only)", "host")
    return store_settings(req, {"admin_host": host}, "settings.admin_host")


def put_admin_allow(req):
    body = req.body if isinstance(req.body, dict) else None
    if body is None or "cidrs" not in body or not set(body) <= {"cidrs", "confirm"}:
        raise invalid('the body must be {"cidrs": [...], "confirm"?: bool}', "cidrs")
    if not isinstance(body.get("confirm", False), bool):
        raise invalid("confirm must be true or false", "confirm")
    cidrs = st.cidr_list("cidrs", body["cidrs"])
    if req.via_admin_host and not st.address_in(req.client_ip, cidrs) and not body.get("confirm"):
        raise conflict("conflict", f"this list shuts out your own address {req.client_ip}; "
                       'send "confirm": true to apply it anyway', "cidrs")
    return store_settings(req, {"admin_allow": cidrs}, "settings.admin_allow")


def _panel_settings(req):
    return current(req.app)


PANEL_SECTIONS = [("settings", "settings:write", _panel_settings)]

ROUTES = [
    Route("GET", "/api/settings", "settings:write", get_settings),
    Route("PUT", "/api/settings", "settings:write", put_settings),
    Route("PUT", "/api/admin-host", "settings:write", put_admin_host),
    Route("PUT", "/api/admin-allow", "settings:write", put_admin_allow),
]
