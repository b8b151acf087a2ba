"""The composition root: build_app(config, clock) builds every service once, in order.

Every service is declared and assigned here, what admin handlers and public
stages reach as req.app (an AdminContext, a PublicContext) is made here from
them, and App.start()/App.stop() list the listeners and background jobs top
to bottom: this file is where a reader learns what the daemon is made of and
in which order it comes up and goes down. Nothing registers itself anywhere
at import time.
"""

import functools
import logging
import secrets
import socket
import threading
import time

from contentnode import __version__, api
from contentnode.api import delivery as delivery_api
from contentnode.api import notifications as notifications_api
from contentnode.api import settings as settings_api
from contentnode.api.context import AdminContext
from contentnode.auth.gate import AdminGate
from contentnode.auth.passkeys import Challenges
from contentnode.auth.passwords import PasswordHasher
from contentnode.auth.ratelimit import FailureLimiter
from contentnode.auth.sessions import SessionManager
from contentnode.clock import Clock
from contentnode.config import Config
from contentnode.core.audit import AuditLog
from contentnode.core.client_address import ClientAddresses
from contentnode.core.backup_runner import BackupRunner
from contentnode.core.events import EventBus
from contentnode.core.folders import FolderRoots
from contentnode.core.geoip import Countries, open_countries
from contentnode.core.metrics import NodeMetrics
from contentnode.core.http_pool import OriginPools
from contentnode.core.netguard import NodeOutbound
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
from contentnode.http.router import SECURITY_HEADERS, AdminDispatcher, RouteTable
from contentnode.http.server import Server
from contentnode.listeners import Listeners
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
    """Every service of one process, built only by build_app; handlers and stages never see it."""

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
    admin_dispatcher: AdminDispatcher  # its handlers reach an AdminContext as req.app, never the App
    public_dispatcher: PublicDispatcher  # its stages reach a PublicContext as req.app, never the App
    listeners: Listeners  # the listening sockets by name (admin, public, https): contentnode/listeners.py
    outbound: NodeOutbound  # outbound(): the OutboundPolicy of the stored settings and the admin port of the moment
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
    domain_checks: DomainChecks  # does a name lead to this node (POST /api/domains/check, before an order)
    certificates: Certificates  # install, issue, renew (services/certificates.py)
    update_check: UpdateCheck  # the update check and its daily job
    jobs: list  # every background job (start()/stop()), in start order; stopped in the reverse one
    access_log: AccessLog  # where access lines go: the access_log start-up value
    draining: threading.Event  # set on SIGTERM: the public /healthz answers 503 while requests are still served
    worker_slot: int | None  # in a public worker process (contentnode/workers.py): its slot, 1..N

    def __init__(self, config: Config, clock: Clock, worker_slot: int | None = None):
        self.config = config
        self.clock = clock
        self.worker_slot = worker_slot
        self.data_dir = config.data_dir
        self.draining = threading.Event()
        self.jobs = []

    # --- start and stop, in order -------------------------------------------

    def start(self) -> None:
        """Listeners first (the node answers as soon as possible), then the jobs, in their order.

        With public workers the public socket is bound here but served by the workers
        (contentnode/workers.py), which daemon.py starts after this.
        """
        settings_api.apply_log_level(self.store, self.config)
        self.listeners.start_server("admin", self.config.admin_bind, self.config.admin_port, self.admin_dispatcher,
                                    headers=SECURITY_HEADERS)
        self.listeners.start_server("public", self.config.public_bind, self.config.public_port,
                                    self.public_dispatcher, serve=self.public_processes == 1)
        self.tls.start()
        for job in self.jobs:
            job.start()

    def stop(self) -> None:
        """Close the listeners (in-flight requests finish), then stop the jobs in the reverse order."""
        self.listeners.stop_all()
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
        self.listeners.drain()

    def serve_public_socket(self, sock) -> Server:
        """In a public worker: serve the listening socket the daemon bound and handed down."""
        address = sock.getsockname()
        return self.listeners.start_server("public", address[0], address[1], self.public_dispatcher, sock=sock)

    @property
    def public_processes(self) -> int:
        """Processes that share the public port's cache: the daemon and its workers, or just one."""
        workers = self.config.public_workers
        return workers + 1 if workers > 1 else 1


def build_app(config: Config, clock: Clock, worker_slot: int | None = None,
              access_log: AccessLog | None = None) -> App:
    """Every service once, in dependency order; the store is loaded before what reads it.

    A public worker (worker_slot 1..N) builds the same App and serves only its public side.
    The daemon opens its access log before it claims the data dir and hands it in.
    """
    app = App(config, clock, worker_slot)
    app.access_log = access_log if access_log is not None else AccessLog(config.access_log, config.access_log_rate)
    store = app.store = Store(config.data_dir, SECTIONS, revisioned=REVISIONED)
    if app.public_processes > 1:
        store.share_changes()   # workers see the daemon's writes from their next request
    store.load()
    if worker_slot is None:
        store.publish()
    app.sessions = SessionManager(config.data_dir, store, clock)
    app.sessions.load()
    if worker_slot is None:
        _ensure_node_identity(store, clock)
    app.hasher = PasswordHasher(config.hash_memory_kib, config.hash_time_cost, config.max_concurrent_hashes)
    app.login_limiter = FailureLimiter()
    app.passkey_challenges = Challenges(clock)
    _apply_policy(store, app.login_limiter)
    app.audit = AuditLog(config.data_dir, clock)
    app.events = EventBus()
    app.metrics = NodeMetrics(time.time(), __version__)
    app.request_log = RequestLog(app.metrics.observe_request, app.access_log)
    # Collaborators are handed the object that holds what they read, never the App. The lambdas below
    # read a value a write or a bind replaces later (the settings section, a bound port): they close
    # over the store or the listeners, not the App (tests/test_service_wiring.py checks).
    settings = lambda: store.data["settings"]  # noqa: E731
    app.addresses = ClientAddresses(settings)
    listeners = app.listeners = Listeners(config, app.request_log, app.addresses.client_ip,
                                          app.addresses.trusted_proxy, worker_slot=worker_slot,
                                          follow=store.follow if worker_slot is not None else None)
    app.outbound = NodeOutbound(settings, lambda: listeners.port("admin") or config.admin_port, config.dns_resolver)
    app.routes = RouteTable(api.ROUTES)
    app.panel_sections = api.PANEL_SECTIONS
    app.panel_files = load_panel_files()
    app.tls = TlsRuntime(store, listeners, config.data_dir, config.public_bind, config.public_port, worker_slot,
                         shared=app.public_processes > 1)
    app.folder_roots = FolderRoots(config.folder_roots, config.data_dir)
    app.countries = open_countries(config.geoip_db)
    app.origin_pools = OriginPools()
    app.delivery = Delivery(store=store, clock=clock, data_dir=config.data_dir, processes=app.public_processes,
                            worker_slot=worker_slot, folder_roots=app.folder_roots, outbound=app.outbound,
                            origin_pools=app.origin_pools, own_ports=app.tls.own_ports)
    delivery_api.register_metrics(app.metrics, app.delivery)
    # traffic insight: a worker only collects; the daemon merges, answers and saves (core/traffic_top.py)
    client_mode = lambda: effective_settings(store.data)["client_addresses"]  # noqa: E731
    app.traffic_top = TrafficTop(None if worker_slot is not None else f"{config.data_dir}/traffic_top.json", clock.now,
                                 client_mode)
    app.traffic_tail = TrafficTail(client_mode)
    app.notifier = notifications_api.build_notifier(store, app.audit, app.outbound, clock.now)
    app.update_check = UpdateCheck(store, clock, app.events, app.outbound, config.update_public_key)
    app.fleet = Fleet(store=store, data_dir=config.data_dir, clock=clock, poll_seconds=config.fleet_poll_seconds,
                      version=__version__, outbound=app.outbound,
                      node_name=lambda: settings().get("node_name", "contentnode"),
                      counters=functools.partial(_traffic_totals, app.delivery), purger=app.delivery.cache,
                      events=app.events, folder_roots=app.folder_roots,
                      address=functools.partial(_admin_address, listeners))
    app.backups = BackupRunner(store, app.data_dir, clock, app.audit, app.events, app.outbound)
    app.domain_checks = DomainChecks(store, clock, app.events, app.outbound,
                                     public_port=functools.partial(listeners.port, "public"))
    app.certificates = Certificates(store, clock, app.tls, app.fleet, app.domain_checks, config.data_dir,
                                    app.outbound)
    app.admin_gate = AdminGate(app.sessions, app.addresses, settings, replica_primary=app.fleet.primary_of_replica)
    app.admin_dispatcher = AdminDispatcher(app.routes, app.admin_gate, app.audit, _admin_context(app))
    app.acme_read_through = fleet_issuer.read_through(app.fleet)
    app.public_dispatcher = PublicDispatcher(_public_context(app))
    app.tls.serve(app.public_dispatcher)
    fleet_alerts.register_metrics(app.metrics, app.fleet, clock)
    if worker_slot is None:
        store.add_commit_listener(app.fleet.on_commit)
        app.delivery.cache.add_purge_listener(app.fleet.on_purge)
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


def _admin_context(app: App) -> AdminContext:
    """What admin handlers reach as req.app: named collaborators, not the App."""
    return AdminContext(
        store=app.store, clock=app.clock, config=app.config, data_dir=app.data_dir, audit=app.audit,
        events=app.events, metrics=app.metrics, sessions=app.sessions, hasher=app.hasher,
        login_limiter=app.login_limiter, apply_policy=functools.partial(_apply_policy, app.store, app.login_limiter),
        passkey_challenges=app.passkey_challenges, routes=app.routes, panel_sections=app.panel_sections,
        panel_files=app.panel_files, bound_port=app.listeners.port, outbound=app.outbound, tls=app.tls,
        delivery=app.delivery, origin_pools=app.origin_pools, folder_roots=app.folder_roots,
        countries=app.countries, traffic_top=app.traffic_top, traffic_tail=app.traffic_tail,
        notifier=app.notifier, fleet=app.fleet, backups=app.backups, domain_checks=app.domain_checks,
        certificates=app.certificates, update_check=app.update_check)


def _apply_policy(store: Store, login_limiter: FailureLimiter) -> None:
    """The login lockout follows the stored policy: at start, and after a write or restore of the policy."""
    policy = store.data["policy"]
    login_limiter.configure(policy["lockout_threshold"], policy["lockout_duration"])


def _public_context(app: App) -> PublicContext:
    """What the public port's stages reach as req.app: named collaborators, not the App."""
    insight = Insight(app.countries, app.traffic_top, app.traffic_tail)
    prepared = PreparedAnswers(app.clock, app.store, app.delivery.cache, app.delivery.traffic, app.metrics, insight)
    return PublicContext(store=app.store, clock=app.clock, delivery=app.delivery, metrics=app.metrics,
                         prepared=prepared, insight=insight, countries=app.countries, draining=app.draining,
                         tls=app.tls, acme_read_through=app.acme_read_through, admin_gate=app.admin_gate,
                         admin_dispatcher=app.admin_dispatcher)


def _admin_address(listeners: Listeners) -> str | None:
    """This machine's host name and admin port: how people tell the fleet's nodes apart."""
    port = listeners.port("admin")
    return f"{socket.gethostname()}:{port}" if port is not None else None


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
