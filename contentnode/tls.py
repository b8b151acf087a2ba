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
    """What the domain, certificate and HTTPS endpoints share in one daemon.

    store: the https settings; listeners: where the HTTPS listener is (re)started (contentnode/listeners.py);
    shared: more than one process serves the public port (pending challenges go to a directory they share).
    """

    def __init__(self, store, listeners, data_dir: str, public_bind: str, public_port: int,
                 worker_slot: int | None, shared: bool):
        self.store, self.listeners = store, listeners
        self.public_bind, self.public_port, self.worker_slot = public_bind, public_port, worker_slot
        self.public_dispatcher = None   # the pipeline the listener serves: see serve()
        self.certs = CertStore(os.path.join(data_dir, "certs"))
        self.selector = SniSelector(self.certs)
        self.challenges = ChallengeStore(os.path.join(data_dir, "acme-challenges") if shared else None,
                                         clear=worker_slot is None)
        self.issuing: set[str] = set()  # hosts with an ACME order in flight
        self.issuing_lock = threading.Lock()
        self._listener_lock = threading.Lock()
        self._own_ports: tuple = (None, frozenset())   # (the ports it was made of, own_ports)

    def serve(self, public_dispatcher) -> None:
        """The public pipeline the HTTPS listener serves: build_app hands it over once it is built
        (the pipeline's stages read this runtime, so it is built after it)."""
        self.public_dispatcher = public_dispatcher

    def https_settings(self) -> dict:
        return dict(HTTPS_DEFAULTS, **(self.store.data.get("https") or {}))

    def listening_port(self) -> int | None:
        """The HTTPS listener's port. A public worker runs no HTTPS listener (the daemon does):
        it goes by the configured port, which the daemon binds when HTTPS is enabled."""
        if self.worker_slot is not None:
            wanted = self.https_settings()
            return wanted["port"] if wanted["enabled"] and wanted["port"] else None
        return self.listeners.port(LISTENER)

    def own_ports(self) -> frozenset:
        """The node's public ports (plain and HTTPS): an http origin there would be a loop."""
        ports = (self.public_port, self.listeners.port("public") or 0, self.listening_port() or 0)
        if ports != self._own_ports[0]:   # the same set while they stay: an origin's check compares it
            self._own_ports = (ports, frozenset(ports) - {0})
        return self._own_ports[1]

    def start_listener(self, port: int):
        """(Re)start the TLS listener on port; OSError when the port cannot be bound."""
        with self._listener_lock:
            self.listeners.stop_server(LISTENER)
            dispatcher = _HstsDispatcher(self, self.public_dispatcher)
            self.listeners.start_server(LISTENER, self.public_bind, port, dispatcher,
                                        tls_context=self.selector.server_context())
            log.info("HTTPS listener on %s port %d", self.public_bind, self.listening_port())

    def stop_listener(self):
        with self._listener_lock:
            if LISTENER in self.listeners.servers:
                self.listeners.stop_server(LISTENER)
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
