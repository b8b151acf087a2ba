"""PUT /api/https: serve TLS on a port, upgrade plain HTTP, send HSTS; no restart needed.

The listener is (re)started before the new settings are stored, so a port
that cannot be bound is refused (409 port_in_use) and changes nothing.
"""

from contentnode.core import fields as v
from contentnode.http.errors import conflict
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, integer, nullable, obj


def https_view(app) -> dict:
    tls = app.tls
    wanted = tls.https_settings()
    hosts = sorted(h for h, d in app.store.data["domains"].items() if d["certificate"])
    return dict(wanted, listening_port=tls.listening_port(), hosts_with_certificates=hosts)


def get_https(req):
    return https_view(req.app)


def put_https(req):
    body = req.body
    current = req.app.tls.https_settings()
    wanted = {
        "enabled": v.boolean(body, "enabled", default=current["enabled"]),
        "port": v.integer(body, "port", 0, 65535, default=current["port"]),
        "redirect_http": v.boolean(body, "redirect_http", default=current["redirect_http"]),
        "hsts": v.boolean(body, "hsts", default=current["hsts"]),
    }
    app = req.app
    taken = {app.bound_port(name) for name in ("admin", "public")} - {None}
    if wanted["port"] and wanted["port"] in taken | {app.config.admin_port, app.config.public_port}:
        raise conflict("port_in_use", f"port {wanted['port']} is used by this node's admin or public port", "port")
    tls = app.tls
    running = tls.listening_port()
    if wanted["enabled"] and (running is None or wanted["port"] != current["port"]):
        try:
            tls.start_listener(wanted["port"])
        except OSError as exc:
            if running is not None:
                tls.start_listener(running)
            raise conflict("port_in_use", f"port {wanted['port']} cannot be used: {exc.strerror or exc}",
                           "port") from None
    elif not wanted["enabled"]:
        tls.stop_listener()
    with app.store.transaction() as doc:
        doc["https"] = wanted
    req.audit("https.update", detail=wanted)
    return https_view(app)


def _panel_https(req):
    return https_view(req.app)


PANEL_SECTIONS = [("https", "settings:write", _panel_https)]

HTTPS_BODY = obj({"enabled": BOOLEAN, "port": integer(0, 65535), "redirect_http": BOOLEAN, "hsts": BOOLEAN})

HTTPS = answer({"enabled": BOOLEAN, "port": integer(0, 65535), "redirect_http": BOOLEAN, "hsts": BOOLEAN,
                "listening_port": nullable(integer(1, 65535)), "hosts_with_certificates": array(STRING)})

ROUTES = [
    Route("GET", "/api/https", "settings:write", get_https, answer=HTTPS),
    Route("PUT", "/api/https", "settings:write", put_https, body=HTTPS_BODY, answer=HTTPS),
]
