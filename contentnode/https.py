"""TLS at run time: the certificate store, the SNI listener, ACME challenges, renewal.

The HTTPS listener is the public dispatcher behind an SNI-selecting context;
PUT /api/https starts, moves or stops it without a restart. Handshakes run in
the worker thread (http/server.py), never in the accept loop. The public port
answers ACME HTTP-01 challenges first, then upgrades plain requests to HTTPS
for hosts with a certificate when asked to.
"""

import logging
import os
import threading

from contentnode.core.acme import ChallengeStore
from contentnode.core.certs import CertStore, SniSelector
from contentnode.daemon import on_start
from contentnode.http.errors import ApiError
from contentnode.http.response import Response, json_response
from contentnode.public import PublicDispatcher, register_public_hook
from contentnode.core.hostnames import host_from_header
from contentnode.store import register_section

log = logging.getLogger("contentnode.https")

register_section("https", dict)

HTTPS_DEFAULTS = {"enabled": False, "port": 443, "redirect_http": False, "hsts": False}
HSTS_VALUE = "max-age=31536000"
CHALLENGE_PREFIX = "/.well-known/acme-challenge/"
CHALLENGE_HOOK_ORDER = 10
UPGRADE_HOOK_ORDER = 20
LISTENER = "https"


class TlsRuntime:
    """What the domain, certificate and HTTPS endpoints share in one daemon."""

    def __init__(self, app):
        self.app = app
        self.certs = CertStore(os.path.join(app.data_dir, "certs"))
        self.selector = SniSelector(self.certs)
        self.challenges = ChallengeStore()
        self.issuing = set()  # hosts with an ACME order in flight
        self.issuing_lock = threading.Lock()
        self._listener_lock = threading.Lock()

    def https_settings(self) -> dict:
        return dict(HTTPS_DEFAULTS, **(self.app.store.data.get("https") or {}))

    def listening_port(self) -> int | None:
        server = self.app.servers.get(LISTENER)
        return server.server_address[1] if server else None

    def start_listener(self, port: int):
        """(Re)start the TLS listener on port; OSError when the port cannot be bound."""
        with self._listener_lock:
            self.app.stop_server(LISTENER)
            dispatcher = _HstsDispatcher(self.app, PublicDispatcher(self.app))
            self.app.start_server(LISTENER, self.app.config.public_bind, port, dispatcher,
                                  tls_context=self.selector.server_context())
            log.info("HTTPS listener on %s port %d", self.app.config.public_bind, self.listening_port())

    def stop_listener(self):
        with self._listener_lock:
            if LISTENER in self.app.servers:
                self.app.stop_server(LISTENER)
                log.info("HTTPS listener stopped")


class _HstsDispatcher:
    """The public dispatcher for TLS connections, adding HSTS when enabled."""

    def __init__(self, app, inner):
        self.app = app
        self.inner = inner

    def __call__(self, req):
        response = self.inner(req)
        if self.app.tls.https_settings()["hsts"] and response.header("Strict-Transport-Security") is None:
            response.headers.append(("Strict-Transport-Security", HSTS_VALUE))
        return response


def challenge_hook(req):
    """Public port: the key authorization of a pending HTTP-01 challenge."""
    if not req.raw_path.startswith(CHALLENGE_PREFIX):
        return None
    answer = req.app.tls.challenges.get(req.raw_path[len(CHALLENGE_PREFIX):])
    if answer is None:
        raise ApiError(404, "not_found", "no such ACME challenge")
    return Response(200, [("Content-Type", "text/plain"), ("Cache-Control", "no-store")], answer.encode("ascii"))


def upgrade_hook(req):
    """Public port: send plain requests for hosts with a certificate to HTTPS."""
    if req.scheme != "http":
        return None
    tls = req.app.tls
    wanted = tls.https_settings()
    port = tls.listening_port()
    if not (wanted["enabled"] and wanted["redirect_http"] and port):
        return None
    host = host_from_header(req.headers.get("Host"))
    if not host or tls.certs.stamp(host) is None:
        return None
    authority = host if port == 443 else f"{host}:{port}"
    location = f"https://{authority}{req.target}"
    return json_response({"redirect": location}, 301, {"Location": location})


_runtime_lock = threading.Lock()


def runtime(app) -> TlsRuntime:
    """The app's TlsRuntime (app.tls), made on first use whichever starter asks first."""
    with _runtime_lock:
        if getattr(app, "tls", None) is None:
            app.tls = TlsRuntime(app)
        return app.tls


@on_start
def _start(app):
    wanted = runtime(app).https_settings()
    if wanted["enabled"]:
        try:
            app.tls.start_listener(wanted["port"])
        except OSError as exc:
            log.error("HTTPS is enabled but port %d cannot be bound: %s", wanted["port"], exc)


register_public_hook(challenge_hook, CHALLENGE_HOOK_ORDER)
register_public_hook(upgrade_hook, UPGRADE_HOOK_ORDER)
