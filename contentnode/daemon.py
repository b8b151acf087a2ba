"""The daemon: builds the App, both listeners and the background jobs; stops cleanly.

Resource areas hook in without touching this file: `@on_start` functions run
once the App is built (start a listener, subscribe to events, schedule a job
with `app.every`), `app.on_shutdown(fn)` callbacks run at a clean stop.
"""

import ipaddress
import logging
import os
import secrets
import signal
import sys
import threading
import time
from functools import lru_cache

from contentnode import __version__, clock
from contentnode.api import all_routes
from contentnode.auth import policy as _policy_sections  # noqa: F401 (registers sections)
from contentnode.auth import scopes
from contentnode.auth.passwords import PasswordHasher, return_hash_memory_to_os
from contentnode.auth.ratelimit import FailureLimiter
from contentnode.auth.sessions import SessionManager
from contentnode.core.audit import AuditLog
from contentnode.core.events import EventBus
from contentnode.core.metrics import NodeMetrics
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.static_files import load_panel_files
from contentnode.core.verify import new_secret
from contentnode.fileio import DataDirLock, ensure_private_dir, remove_stale_temps
from contentnode.http.errors import forbidden
from contentnode.http.request import Request
from contentnode.http.router import AdminDispatcher, RouteTable
from contentnode.http.server import Server
from contentnode.public import PublicDispatcher
from contentnode.store import Store, register_section

log = logging.getLogger("contentnode")

_STARTERS = []
register_section("node", dict)
register_section("settings", dict)


def on_start(fn):
    """Register fn(app) to run when the daemon starts, after the App is built."""
    _STARTERS.append(fn)
    return fn


def _networks(cidrs) -> tuple:
    return _parse_networks(tuple(cidrs or ()))


@lru_cache(maxsize=32)
def _parse_networks(cidrs: tuple) -> tuple:
    """Parsed once per distinct list, not on every request."""
    result = []
    for cidr in cidrs:
        try:
            result.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            log.warning("ignoring invalid network %r", cidr)
    return tuple(result)


class App:
    """Everything a handler may reach through req.app."""

    def __init__(self, config):
        self.config = config
        self.data_dir = config.data_dir
        self.store = Store(self.data_dir)
        self.sessions = SessionManager(self.data_dir, self.store)
        self.hasher = PasswordHasher(config.hash_memory_kib, config.hash_time_cost, config.max_concurrent_hashes)
        self.login_limiter = FailureLimiter()
        self.audit = AuditLog(self.data_dir)
        self.events = EventBus()
        self.metrics = NodeMetrics(time.time())
        self.scopes = scopes
        self.routes = RouteTable(all_routes())
        self.panel_files = load_panel_files()
        self.servers = {}
        self._shutdown_callbacks = []
        self._jobs = []
        self._stopping = threading.Event()

    def load(self) -> None:
        self.store.load()
        self.sessions.load()
        if not self.store.data["node"].get("secret"):
            with self.store.transaction() as doc:
                doc["node"] = {"id": secrets.token_hex(8), "secret": new_secret(), "created_at": clock.now()}
        self.apply_policy()

    def apply_policy(self) -> None:
        policy = self.store.data["policy"]
        self.login_limiter.configure(policy["lockout_threshold"], policy["lockout_duration"])

    @property
    def settings(self) -> dict:
        return self.store.data["settings"]

    @property
    def outbound(self) -> OutboundPolicy:
        admin = self.servers.get("admin")
        port = admin.server_address[1] if admin else self.config.admin_port
        return OutboundPolicy(allow_private=self.settings.get("allow_private_outbound", True),
                              admin_ports=frozenset({port}))

    def admin_host(self) -> str | None:
        return self.settings.get("admin_host")

    def network_check(self, req) -> None:
        """The admin allow list governs the admin host on the public side only."""
        if not req.via_admin_host:
            return
        address = ipaddress.ip_address(req.client_ip)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped  # a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d
        if not any(address in net for net in _networks(self.settings.get("admin_allow"))):
            raise forbidden("ip_not_allowed", "this address is not on the admin allow list")

    def client_ip(self, req) -> str:
        """The peer address, or the X-Forwarded-For client when the peer is a trusted proxy."""
        trusted = _networks(self.settings.get("trusted_proxies"))
        if not trusted:
            return req.peer_ip
        forwarded = [a.strip() for a in (req.headers.get("X-Forwarded-For") or "").split(",") if a.strip()]
        hops = [req.peer_ip] + forwarded[::-1]  # nearest first
        for hop in hops:
            try:
                address = ipaddress.ip_address(hop)
            except ValueError:
                return req.peer_ip
            if not any(address in net for net in trusted):
                return hop
        return hops[-1]

    # --- background work ----------------------------------------------------

    def every(self, seconds: float, fn, name: str) -> None:
        """Run fn() every `seconds` on its own daemon thread until shutdown; errors are logged."""
        def loop():
            while not self._stopping.wait(seconds):
                try:
                    fn()
                except Exception:
                    log.exception("background job %s failed", name)
        thread = threading.Thread(target=loop, name=f"job-{name}", daemon=True)
        self._jobs.append(thread)
        thread.start()

    def on_shutdown(self, fn) -> None:
        self._shutdown_callbacks.append(fn)

    def make_dispatch(self, port_name: str, dispatcher, scheme: str = "http"):
        def dispatch(handler):
            req = Request(handler, port_name, scheme)
            req.client_ip = self.client_ip(req)
            return dispatcher(req)
        return dispatch

    def on_request(self, port_name, handler, response, seconds) -> None:
        self.metrics.observe_request(port_name, handler.command, response.status, seconds)
        if access_log.isEnabledFor(logging.INFO):
            write_access_line(port_name, handler.client_address[0], handler.command, handler.path,
                              response.status, getattr(handler, "bytes_sent", 0), seconds)

    def start_server(self, name: str, bind: str, port: int, dispatcher, tls_context=None) -> Server:
        server = Server((bind, port), self.make_dispatch(name, dispatcher, "https" if tls_context else "http"),
                        name, max_connections=self.config.max_connections,
                        request_timeout=self.config.request_timeout, idle_timeout=self.config.idle_timeout,
                        tls_context=tls_context, on_request=self.on_request)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.25},
                                  name=f"{name}-accept", daemon=True)
        thread.start()
        self.servers[name] = server
        return server

    def stop_server(self, name: str) -> None:
        server = self.servers.pop(name, None)
        if server is not None:
            server.close_gracefully()

    def shutdown(self) -> None:
        self._stopping.set()
        for name in list(self.servers):
            self.stop_server(name)
        for fn in self._shutdown_callbacks:
            try:
                fn()
            except Exception:
                log.exception("shutdown step failed")
        self.sessions.flush()


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
access_log = logging.getLogger("contentnode.access")
_stamp = [0, ""]


def write_access_line(port, client, method, target, status, size, seconds) -> None:
    """One line per request, in the logging format but without its per-record cost.

    The query string is left out (it may carry signatures); control characters are escaped.
    """
    now = int(time.time())
    if _stamp[0] != now:
        _stamp[1] = time.strftime(LOG_DATE_FORMAT, time.localtime(now))
        _stamp[0] = now
    path = target.split("?", 1)[0][:300]
    if not path.isprintable():
        path = path.encode("unicode_escape").decode("ascii")
    sys.stderr.write(f'{_stamp[1]} INFO contentnode.access: {port} {client} "{method} {path}" '
                     f"{status} {size} {seconds * 1000:.1f}ms\n")


def setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, level.upper()),
                        format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT)


def serve(config) -> int:
    setup_logging(config.log_level)
    return_hash_memory_to_os()
    ensure_private_dir(config.data_dir)
    lock = DataDirLock(config.data_dir)
    lock.acquire()
    if remove_stale_temps(config.data_dir):
        log.info("removed temp files left by an interrupted write")
    app = App(config)
    app.load()
    admin = app.start_server("admin", config.admin_bind, config.admin_port, AdminDispatcher(app, app.routes))
    public = app.start_server("public", config.public_bind, config.public_port, PublicDispatcher(app))
    app.every(30, app.sessions.flush, "sessions-flush")
    app.every(300, app.sessions.prune, "sessions-prune")
    for starter in _STARTERS:
        starter(app)
    setup_required = not any(u["role"] == "admin" for u in app.store.data["users"].values())
    log.info("contentnode %s, data dir %s", __version__, config.data_dir)
    log.info("admin API on http://%s:%d", config.admin_bind, admin.server_address[1])
    log.info("public port on http://%s:%d", config.public_bind, public.server_address[1])
    if setup_required:
        log.info("setup required: POST /api/setup {\"username\",\"password\"} on the admin API "
                 "creates the first administrator")
    stop = threading.Event()

    def request_stop(signum, frame):
        log.info("signal %d: stopping (in-flight requests may finish)", signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    ready_file = os.environ.get("CONTENTNODE_READY_FILE")
    if ready_file:
        with open(ready_file, "w") as f:
            f.write(f"{admin.server_address[1]} {public.server_address[1]}\n")
    while not stop.wait(1.0):
        pass
    app.shutdown()
    lock.release()
    log.info("stopped")
    return 0
