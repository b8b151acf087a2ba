"""Node settings (settings:write): GET/PUT /api/settings, PUT /api/admin-host,
PUT /api/admin-allow. Every answer is the whole settings object with its revision;
each of the three PUTs takes If-Match against it."""

import logging

from contentnode.core import revisions
from contentnode.core import settings as st
from contentnode.http.errors import conflict, invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, integer, nullable, obj, one_of, refused, text


def current(app) -> dict:
    return st.effective(app.store.data)


def view(doc) -> dict:
    """The settings object the API answers: every setting and the revision."""
    return dict(st.effective(doc), revision=revisions.of_section(doc, "settings"))


def store_settings(req, changes: dict, action: str) -> dict:
    """Write changed keys durably, audit which keys changed (values may be addresses, never secrets)."""
    with req.app.store.transaction() as doc:
        revisions.require("the settings", revisions.of_section(doc, "settings"), req.if_match)
        doc.setdefault("settings", {}).update(changes)
    req.audit(action, detail={"changed": sorted(changes)})
    return view(doc)


def apply_log_level(store, config, changed: bool = False) -> None:
    """The stored log level stands in for the default at start; a start-up value (config file,
    environment, flag) beats it. A PUT that changes it applies at once, until the next start."""
    level = store.data.get("settings", {}).get("log_level")
    if level and (changed or config.sources.get("log_level") == "default"):
        logging.getLogger().setLevel(level.upper())


def get_settings(req):
    return view(req.app.store.data)


def put_settings(req):
    changes = st.validate(req.body)
    if not changes:
        raise invalid("no setting given")
    answer = store_settings(req, changes, "settings.update")
    apply_log_level(req.app.store, req.app.config, changed="log_level" in changes)
    if "cache_max_bytes" in changes:
        req.app.delivery.sync_settings()  # at once, not at the next periodic flush
    return answer


def _valid_certificate(app, host: str) -> bool:
    leaf = app.tls.certs.leaf(host)
    return leaf is not None and leaf.not_valid_after_utc.timestamp() > app.clock.now()


def put_admin_host(req):
    host = req.body["host"]  # the shape is ADMIN_HOST_BODY's
    if host is not None:
        host = st.hostname("host", host)
        if not _valid_certificate(req.app, host):
            raise invalid(f"no valid certificate for {host}: issue or upload one first "
                          "(the admin host is served over HTTPS only)", "host")
    return store_settings(req, {"admin_host": host}, "settings.admin_host")


def put_admin_allow(req):
    body = req.body  # the shape is ADMIN_ALLOW_BODY's
    cidrs = st.cidr_list("cidrs", body["cidrs"])
    if req.via_admin_host and not st.address_in(req.client_ip, cidrs) and not body.get("confirm"):
        raise conflict("conflict", f"this list shuts out your own address {req.client_ip}; "
                       'send "confirm": true to apply it anyway', "cidrs")
    return store_settings(req, {"admin_allow": cidrs}, "settings.admin_allow")


def _panel_settings(req):
    return view(req.app.store.data)


PANEL_SECTIONS = [("settings", "settings:write", _panel_settings)]

_URL = text(2048)
SETTINGS_BODY = obj({
    "node_name": text(64), "public_url": nullable(_URL), "public_scheme": one_of("http", "https"),
    "public_port": nullable(integer(1, 65535)), "acme_directory": _URL, "acme_email": nullable(text(254)),
    "cache_max_bytes": integer(0, st.MAX_CACHE_BYTES), "allow_private_outbound": BOOLEAN,
    "trusted_proxies": array({"type": "string"}, st.MAX_CIDRS), "link_grace_seconds": integer(0, st.MAX_GRACE),
    "log_level": one_of(*st.LOG_LEVELS), "client_addresses": one_of(*st.CLIENT_ADDRESSES),
    **{key: refused(f"is changed with PUT /api/{key.replace('_', '-')}") for key in st.DEFAULTS
       if key not in st.GENERAL_DEFAULTS}}, description="a partial update: the settings given change")
UPDATES = answer({"channel": one_of(*st.UPDATE_CHANNELS), "auto_check": BOOLEAN, "url": nullable(STRING)})
SETTINGS = answer({
    "node_name": STRING, "public_url": nullable(STRING), "public_scheme": one_of("http", "https"),
    "public_port": nullable(integer(1, 65535)), "acme_directory": STRING, "acme_email": nullable(STRING),
    "cache_max_bytes": integer(0, st.MAX_CACHE_BYTES), "allow_private_outbound": BOOLEAN,
    "trusted_proxies": array(STRING), "link_grace_seconds": integer(0, st.MAX_GRACE),
    "log_level": one_of(*st.LOG_LEVELS), "client_addresses": one_of(*st.CLIENT_ADDRESSES),
    "admin_host": nullable(STRING), "admin_allow": array(STRING),
    "updates": UPDATES})
ADMIN_HOST_BODY = obj({"host": nullable(text(253))}, required=["host"], description="null: no admin host")
ADMIN_ALLOW_BODY = obj({"cidrs": array({"type": "string"}, st.MAX_CIDRS), "confirm": BOOLEAN},
                       required=["cidrs"], description="[] allows every address")

ROUTES = [
    Route("GET", "/api/settings", "settings:write", get_settings, answer=SETTINGS),
    Route("PUT", "/api/settings", "settings:write", put_settings, body=SETTINGS_BODY, answer=SETTINGS, if_match=True,
          fleet_shared_fields=st.FLEET_SHARED),
    Route("PUT", "/api/admin-host", "settings:write", put_admin_host, body=ADMIN_HOST_BODY, answer=SETTINGS, if_match=True),
    Route("PUT", "/api/admin-allow", "settings:write", put_admin_allow, body=ADMIN_ALLOW_BODY, answer=SETTINGS, if_match=True),
]
