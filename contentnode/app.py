"""The composition root: build_app(config, clock) builds every service once, in order.

Every attribute a handler may reach through req.app is declared and assigned
here, and App.start()/App.stop() list the listeners and background jobs top
to bottom: this file is where a reader learns what the daemon is made of and
in which order it comes up and goes down. Nothing registers itself anywhere
at import time.
"""

import logging
import os
import secrets
import socket
import threading
import time

from contentnode import __version__, api, oscalls
from contentnode.api import delivery as delivery_api
from contentnode.api import notifications as notifications_api
from contentnode.api import settings as settings_api
from contentnode.auth.gate import AdminGate
from contentnode.auth.passkeys import Challenges
from contentnode.auth.passwords import PasswordHasher
from contentnode.auth.ratelimit import FailureLimiter
from contentnode.auth.sessions import SessionManager
from contentnode.clock import Clock
from contentnode.config import ADMIN_MAX_CONNECTIONS, Config
from contentnode.core.audit import AuditLog
from contentnode.core.client_address import ClientAddresses
from contentnode.core.backup_runner import BackupRunner
from contentnode.core.events import EventBus
from contentnode.core.folders import FolderRoots
from contentnode.core.geoip import Countries, open_countries
from contentnode.core.metrics import NodeMetrics
from contentnode.core.http_pool import OriginPools
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.notify import Notifier
from contentnode.core.settings import effective as effective_settings
from contentnode.core.static_files import load_panel_files
from contentnode.core.traffic import COUNTERS
from contentnode.core.traffic_tail import TrafficTail
from contentnode.core.traffic_top import TrafficTop
from contentnode.core.verify import new_secret
from contentnode.fleet import alerts as fleet_alerts
from contentnode.fleet import issuer as fleet_issuer
from contentnode.fleet.challenges import ReadThrough
from contentnode.fleet.service import Fleet
from contentnode.http.binding import BindError
from contentnode.http.entry import Entry
from contentnode.http.router import SECURITY_HEADERS, AdminDispatcher, RouteTable
from contentnode.http.parking import ParkingServer
from contentnode.http.server import Server
from contentnode.logs import AccessLog, RequestLog
from contentnode.public import PublicDispatcher
from contentnode.public.context import PublicContext
from contentnode.public.insight import Insight
from contentnode.public.prepared import PreparedAnswers
from contentnode.schema import REVISIONED, SECTIONS
from contentnode.services.certificates import Certificates
from contentnode.services.delivery import Delivery
from contentnode.services.domain_checks import DomainChecks
from contentnode.services.jobs import Every
from contentnode.services.updates import UpdateCheck
from contentnode.store import Store
from contentnode.tls import TlsRuntime

log = logging.getLogger("contentnode")
SESSION_FLUSH_SECONDS = 30
SESSION_PRUNE_SECONDS = 300


class App:
    """Everything a handler may reach through req.app; built only by build_app."""

    config: Config
    clock: Clock
    data_dir: str
    store: Store
    sessions: SessionManager
    hasher: PasswordHasher
    login_limiter: FailureLimiter
    passkey_challenges: Challenges  # WebAuthn challenges waiting for their answer (memory only)
    audit: AuditLog
    events: EventBus
    metrics: NodeMetrics
    request_log: RequestLog  # after each answer: the request counted and its access line
    addresses: ClientAddresses  # the client-address policy (trusted_proxies, X-Forwarded-For; admin_allow)
    admin_gate: AdminGate  # what the admin dispatcher asks: who, may they, from where, under which Host
    routes: RouteTable
    panel_sections: list
    panel_files: dict  # the web panel's static files, read once at start
    admin_dispatcher: AdminDispatcher
    public_dispatcher: PublicDispatcher  # its stages reach a PublicContext as req.app, never the App
    tls: TlsRuntime
    delivery: Delivery
    traffic_top: TrafficTop  # top paths, clients... per domain and minute/hour (core/traffic_top.py)
    traffic_tail: TrafficTail  # the most recent public requests (core/traffic_tail.py)
    origin_pools: OriginPools  # kept-alive connections to the http buckets' origins (core/http_pool.py)
    folder_roots: FolderRoots  # where folder buckets may serve from (start-up value folder_roots)
    countries: Countries  # the country database (start-up value geoip_db), opened once per process
    notifier: Notifier
    fleet: Fleet
    backups: BackupRunner  # the scheduled backup's runs (its job, "run now", the status)
    acme_read_through: ReadThrough  # HTTP-01 answers another fleet node published (fleet/challenges.py)
    servers: dict
    domain_checks: DomainChecks  # does a name lead to this node (POST /api/domains/check, before an order)
    certificates: Certificates  # install, issue, renew (services/certificates.py)
    update_check: UpdateCheck  # the update check and its daily job
    jobs: list  # every background job (start()/stop()), in start order; stopped in the reverse one
    access_log: AccessLog  # where access lines go: the access_log start-up value
    draining: threading.Event  # set on SIGTERM: the public /healthz answers 503 while requests are still served
    accept_poll_seconds: float  # how often an accept loop looks for stop(): each listener's stop waits that long
    worker_slot: int | None  # in a public worker process (contentnode/workers.py): its slot, 1..N

    def __init__(self, config: Config, clock: Clock, worker_slot: int | None = None):
        self.config = config
        self.clock = clock
        self.worker_slot = worker_slot
        self.data_dir = config.data_dir
        self.servers = {}  # listener name -> Server; the HTTPS listener comes and goes at run time
        self.draining = threading.Event()
        self.accept_poll_seconds = 0.25
        self.jobs = []
        self._outbound: tuple = (None, None, None)   # (settings, admin port, OutboundPolicy): see outbound
        self._own_ports: tuple = (None, frozenset())   # (the ports it was made of, own_ports)

    # --- start and stop, in order -------------------------------------------

    def start(self) -> None:
        """Listeners first (the node answers as soon as possible), then the jobs, in their order.

        With public workers the public socket is bound here but served by the workers
        (contentnode/workers.py), which daemon.py starts after this.
        """
        settings_api.apply_log_level(self)
        self.start_server("admin", self.config.admin_bind, self.config.admin_port, self.admin_dispatcher,
                          headers=SECURITY_HEADERS)
        self.start_server("public", self.config.public_bind, self.config.public_port, self.public_dispatcher,
                          serve=self.public_processes == 1)
        self.tls.start()
        for job in self.jobs:
            job.start()

    def stop(self) -> None:
        """Close the listeners (in-flight requests finish), then stop the jobs in the reverse order."""
        for name in list(self.servers):
            self.stop_server(name)
        for job in reversed(self.jobs):
            try:
                job.stop()
            except Exception:
                log.exception("stopping background job %s failed", type(job).__name__)
        self.origin_pools.close()   # the http origins' kept connections (the content engine has stopped)
        self.access_log.close()

    def drain(self) -> None:
        """Tell balancers to go (the public /healthz answers 503) while every request is still served;
        answers carry Connection: close, so kept-alive clients come back through the balancer."""
        self.draining.set()
        for server in self.servers.values():
            server.draining = True

    def serve_public_socket(self, sock) -> Server:
        """In a public worker: serve the listening socket the daemon bound and handed down."""
        address = sock.getsockname()
        return self.start_server("public", address[0], address[1], self.public_dispatcher, sock=sock)

    # --- what handlers ask --------------------------------------------------

    @property
    def public_processes(self) -> int:
        """Processes that share the public port's cache: the daemon and its workers, or just one."""
        workers = self.config.public_workers
        return workers + 1 if workers > 1 else 1

    @property
    def settings(self) -> dict:
        return self.store.data["settings"]

    @property
    def outbound(self) -> OutboundPolicy:
        """The policy of the stored settings and the admin port, made again only when either changed
        (every origin miss asks: services/delivery.py). A write replaces the settings section, never
        changes it in place (store.py), so the same section object means the same settings."""
        admin = self.servers.get("admin")
        port = admin.server_address[1] if admin else self.config.admin_port
        settings, made_port, policy = self._outbound
        if settings is not self.settings or made_port != port:
            policy = OutboundPolicy.for_node(self.settings, port, self.config.dns_resolver)
            self._outbound = (self.settings, port, policy)
        return policy

    @property
    def own_ports(self) -> frozenset:
        """The node's public ports (plain and HTTPS): an http origin there would be a loop."""
        public = self.servers.get("public")
        ports = (self.config.public_port, public.server_address[1] if public else 0, self.tls.listening_port() or 0)
        if ports != self._own_ports[0]:   # the same set while they stay: an origin's check compares it
            self._own_ports = (ports, frozenset(ports) - {0})
        return self._own_ports[1]

    def apply_policy(self) -> None:
        policy = self.store.data["policy"]
        self.login_limiter.configure(policy["lockout_threshold"], policy["lockout_duration"])

    # --- listeners and jobs -------------------------------------------------

    def start_server(self, name: str, bind: str, port: int, dispatcher, tls_context=None,
                     serve: bool = True, sock=None, headers=()) -> Server:
        """Bind (or take `sock`) and, when `serve`, accept on a thread of its own; `headers` go
        on the answers the listener makes itself (parser errors), as the dispatcher's carry them."""
        config = self.config
        limits = dict(header_timeout=config.header_timeout, idle_timeout=config.idle_timeout,
                      send_timeout=config.send_timeout, on_request=self.request_log, sock=sock, headers=headers)
        try:
            again = getattr(dispatcher, "again", None)   # the public dispatchers' prepared answers
            follow = self.store.follow if self.worker_slot is not None else None   # a worker reads the daemon's writes
            entry = Entry(name, "https" if tls_context else "http", dispatcher, self.addresses.client_ip, again, follow)
            if name == "admin":
                server = Server((bind, port), entry, name, **limits,
                                max_connections=min(config.max_connections, ADMIN_MAX_CONNECTIONS))
            else:   # the public listeners park idle connections (docs/ARCHITECTURE.md, "Connection handling")
                server = ParkingServer((bind, port), entry, name, **limits, max_connections=config.max_connections,
                                       threads=config.public_threads, per_client=config.max_connections_per_client,
                                       requests_per_client=config.max_requests_per_client,
                                       head_budget=config.max_unfinished_head_bytes,
                                       uncapped=self.addresses.trusted_proxy, tls_context=tls_context)
        except OSError as exc:
            raise BindError(name, bind, port, exc) from exc
        if serve:
            cpu = self.public_cpu() if name == "public" else None
            thread = threading.Thread(target=self._accept, args=(server, cpu), name=f"{name}-accept", daemon=True)
            thread.start()
        self.servers[name] = server
        return server

    def _accept(self, server: Server, cpu: int | None) -> None:
        if cpu is not None:  # this thread only; its connection threads inherit it
            oscalls.attempt("sched_setaffinity", "the public port's threads run on any CPU",
                            os.sched_setaffinity, 0, {cpu})
        server.serve_forever(poll_interval=self.accept_poll_seconds)

    def public_cpu(self) -> int | None:
        """The CPU the public port's threads keep to, or None to let the scheduler move them.

        One interpreter runs one thread at a time (the GIL), so spreading a listener's
        threads over several CPUs buys no parallelism, only handoffs between cores:
        bench_content measured a 10 KB hit at 187 us of CPU unpinned and 125 us kept
        to one CPU on 2 CPUs. Public worker N keeps to the Nth allowed CPU (the daemon
        to the first), so workers spread over the CPUs; the admin API, jobs and the
        HTTPS listener are left free.
        """
        if self.config.public_cpu_affinity == "off" or not hasattr(os, "sched_getaffinity"):
            return None  # off, or a system without CPU sets (not Linux)
        allowed = sorted(oscalls.attempt("sched_getaffinity", "the public port's threads run on any CPU",
                                         os.sched_getaffinity, 0) or ())
        if len(allowed) < 2:
            return None
        return allowed[(self.worker_slot or 0) % len(allowed)]

    def stop_server(self, name: str) -> None:
        server = self.servers.pop(name, None)
        if server is not None:
            server.close_gracefully()


def build_app(config: Config, clock: Clock, worker_slot: int | None = None,
              access_log: AccessLog | None = None) -> App:
    """Every service once, in dependency order; the store is loaded before what reads it.

    A public worker (worker_slot 1..N) builds the same App and serves only its public side.
    The daemon opens its access log before it claims the data dir and hands it in.
    """
    app = App(config, clock, worker_slot)
    app.access_log = access_log if access_log is not None else AccessLog(config.access_log, config.access_log_rate)
    app.store = Store(config.data_dir, SECTIONS, revisioned=REVISIONED)
    if app.public_processes > 1:
        app.store.share_changes()   # workers see the daemon's writes from their next request
    app.store.load()
    if worker_slot is None:
        app.store.publish()
    app.sessions = SessionManager(config.data_dir, app.store, clock)
    app.sessions.load()
    if worker_slot is None:
        _ensure_node_identity(app.store, clock)
    app.hasher = PasswordHasher(config.hash_memory_kib, config.hash_time_cost, config.max_concurrent_hashes)
    app.login_limiter = FailureLimiter()
    app.passkey_challenges = Challenges(clock)
    app.apply_policy()
    app.audit = AuditLog(config.data_dir, clock)
    app.events = EventBus()
    app.metrics = NodeMetrics(time.time(), __version__)
    app.request_log = RequestLog(app.metrics.observe_request, app.access_log)
    app.addresses = ClientAddresses(lambda: app.settings)
    app.routes = RouteTable(api.ROUTES)
    app.panel_sections = api.PANEL_SECTIONS
    app.panel_files = load_panel_files()
    app.admin_gate = AdminGate(app.sessions, app.addresses, lambda: app.settings,
                               replica_primary=lambda: app.fleet.primary_of_replica())
    app.admin_dispatcher = AdminDispatcher(app.routes, app.admin_gate, handler_context=app)
    app.tls = TlsRuntime(app, lambda: app.public_dispatcher)
    app.folder_roots = FolderRoots(config.folder_roots, config.data_dir)
    app.countries = open_countries(config.geoip_db)
    app.origin_pools = OriginPools()
    app.delivery = Delivery(store=app.store, clock=clock, data_dir=config.data_dir, processes=app.public_processes,
                            worker_slot=worker_slot, folder_roots=app.folder_roots, outbound=lambda: app.outbound,
                            origin_pools=app.origin_pools, own_ports=lambda: app.own_ports)
    delivery_api.register_metrics(app.metrics, app.delivery)
    # traffic insight: a worker only collects; the daemon merges, answers and saves (core/traffic_top.py)
    client_mode = lambda: effective_settings(app.store.data)["client_addresses"]  # noqa: E731
    app.traffic_top = TrafficTop(None if worker_slot is not None else f"{config.data_dir}/traffic_top.json", clock.now,
                                 client_mode)
    app.traffic_tail = TrafficTail(client_mode)
    app.notifier = notifications_api.build_notifier(app)
    app.update_check = UpdateCheck(app.store, clock, app.events, lambda: app.outbound, config.update_public_key)
    app.fleet = Fleet(store=app.store, data_dir=config.data_dir, clock=clock, poll_seconds=config.fleet_poll_seconds,
                      version=__version__, outbound=lambda: app.outbound,
                      node_name=lambda: app.settings.get("node_name", "contentnode"),
                      counters=lambda: _traffic_totals(app.delivery), purger=app.delivery.cache, events=app.events,
                      folder_roots=app.folder_roots, address=lambda: _admin_address(app))
    app.acme_read_through = fleet_issuer.read_through(app.fleet)
    app.public_dispatcher = PublicDispatcher(_public_context(app))
    fleet_alerts.register_metrics(app.metrics, app.fleet, clock)
    if worker_slot is None:
        app.store.add_commit_listener(app.fleet.on_commit)
        app.delivery.cache.add_purge_listener(app.fleet.on_purge)
    app.backups = BackupRunner(app.store, app.data_dir, clock, app.audit, app.events, lambda: app.outbound)
    app.domain_checks = DomainChecks(app.store, clock, app.events, lambda: app.outbound,
                                     public_port=lambda: app.servers["public"].server_address[1])
    app.certificates = Certificates(app.store, clock, app.tls, app.fleet, app.domain_checks, config.data_dir,
                                    lambda: app.outbound)
    app.metrics.watch_certificates(app.certificates.installed)
    if worker_slot is None:
        app.events.subscribe(app.notifier.handle_event)
    # every background job, in start order (App.stop stops them in the reverse one)
    app.jobs = [
        Every("sessions-flush", SESSION_FLUSH_SECONDS, app.sessions.flush, at_stop=app.sessions.flush),
        Every("sessions-prune", SESSION_PRUNE_SECONDS, app.sessions.prune),
        app.delivery.flush_job(),
        Every("traffic-top-save", config.traffic_save_seconds, app.traffic_top.save, at_stop=app.traffic_top.save),
        app.notifier,
        app.update_check,
        app.certificates.renewal(app.events, app.audit),
        app.fleet,
        Every("backup-schedule", config.backup_poll_seconds, app.backups.tick),
    ]
    return app


def _public_context(app: App) -> PublicContext:
    """What the public port's stages reach as req.app: named collaborators, not the App."""
    insight = Insight(app.countries, app.traffic_top, app.traffic_tail)
    prepared = PreparedAnswers(app.clock, app.store, app.delivery.cache, app.delivery.traffic, app.metrics, insight)
    return PublicContext(store=app.store, clock=app.clock, delivery=app.delivery, metrics=app.metrics,
                         prepared=prepared, insight=insight, countries=app.countries, draining=app.draining,
                         tls=app.tls, acme_read_through=app.acme_read_through, admin_gate=app.admin_gate,
                         admin_dispatcher=app.admin_dispatcher)


def _admin_address(app) -> str | None:
    """This machine's host name and admin port: how people tell the fleet's nodes apart."""
    admin = app.servers.get("admin")
    return f"{socket.gethostname()}:{admin.server_address[1]}" if admin is not None else None


def _traffic_totals(delivery: Delivery) -> dict:
    """This process's public traffic summed over domains (a fleet status reports it)."""
    out = dict.fromkeys(COUNTERS, 0)
    for counters in delivery.traffic.totals().values():
        for name, value in counters.items():
            out[name] = out.get(name, 0) + value
    return out


def _ensure_node_identity(store: Store, clock: Clock) -> None:
    """A node id and verification secret, made once on the first start."""
    if not store.data["node"].get("secret"):
        with store.transaction() as doc:
            doc["node"] = {"id": secrets.token_hex(8), "secret": new_secret(), "created_at": clock.now()}
