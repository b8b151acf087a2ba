"""TLS at run time: the certificate store, the SNI listener, pending ACME challenges.

The HTTPS listener is the public pipeline behind an SNI-selecting context;
PUT /api/https starts, moves or stops it without a restart. Handshakes run in
a pool thread under header_timeout (http/parking.py), never in the accept loop. The public
pipeline's acme_challenge and https_upgrade stages read this runtime.
"""

import logging
import os
import threading

from contentnode.core.acme import ChallengeStore
from contentnode.core.certs import CertStore, SniSelector

log = logging.getLogger("contentnode.https")

HTTPS_DEFAULTS = {"enabled": False, "port": 443, "redirect_http": False, "hsts": False}
HSTS_VALUE = "max-age=31536000"
LISTENER = "https"


class TlsRuntime:
    """What the domain, certificate and HTTPS endpoints share in one daemon."""

    def __init__(self, app, public_dispatcher):
        self.app = app
        self.public_dispatcher = public_dispatcher   # a callable: the dispatcher is built after this runtime
        self.certs = CertStore(os.path.join(app.data_dir, "certs"))
        self.selector = SniSelector(self.certs)
        self.challenges = ChallengeStore(
            os.path.join(app.data_dir, "acme-challenges") if app.public_processes > 1 else None,
            clear=app.worker_slot is None)
        self.issuing = set()  # hosts with an ACME order in flight
        self.issuing_lock = threading.Lock()
        self._listener_lock = threading.Lock()

    def https_settings(self) -> dict:
        return dict(HTTPS_DEFAULTS, **(self.app.store.data.get("https") or {}))

    def listening_port(self) -> int | None:
        """The HTTPS listener's port. A public worker runs no HTTPS listener (the daemon does):
        it goes by the configured port, which the daemon binds when HTTPS is enabled."""
        if self.app.worker_slot is not None:
            wanted = self.https_settings()
            return wanted["port"] if wanted["enabled"] and wanted["port"] else None
        server = self.app.servers.get(LISTENER)
        return server.server_address[1] if server else None

    def start_listener(self, port: int):
        """(Re)start the TLS listener on port; OSError when the port cannot be bound."""
        with self._listener_lock:
            self.app.stop_server(LISTENER)
            dispatcher = _HstsDispatcher(self, self.public_dispatcher())
            self.app.start_server(LISTENER, self.app.config.public_bind, port, dispatcher,
                                  tls_context=self.selector.server_context())
            log.info("HTTPS listener on %s port %d", self.app.config.public_bind, self.listening_port())

    def stop_listener(self):
        with self._listener_lock:
            if LISTENER in self.app.servers:
                self.app.stop_server(LISTENER)
                log.info("HTTPS listener stopped")

    def start(self) -> None:
        """At daemon start: listen when HTTPS is enabled; a port that cannot be bound is logged."""
        wanted = self.https_settings()
        if wanted["enabled"]:
            try:
                self.start_listener(wanted["port"])
            except OSError as exc:
                log.error("HTTPS is enabled but port %d cannot be bound: %s", wanted["port"], exc)


class _HstsDispatcher:
    """The public dispatcher for TLS connections, adding HSTS when enabled."""

    def __init__(self, tls, inner):
        self.tls = tls
        self.inner = inner

    def again(self, handler, port_name: str):
        """The public port's prepared answers over TLS too: a kept head was made after __call__ added
        HSTS, and a change of the setting is a new state document, which the prepared answer checks."""
        return self.inner.again(handler, port_name)

    def __call__(self, req):
        return self._with_hsts(self.inner(req))

    def resume(self, req):
        """A request the loop thread deferred, gone on with by the inner dispatcher."""
        return self._with_hsts(self.inner.resume(req))

    def _with_hsts(self, response):
        if self.tls.https_settings()["hsts"] and response.header("Strict-Transport-Security") is None:
            response.headers.append(("Strict-Transport-Security", HSTS_VALUE))
        return response
