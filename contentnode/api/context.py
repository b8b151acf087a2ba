"""What an admin handler reaches as req.app: the collaborators the composition root hands the admin API.

Handlers read only these, never the App: app.py build_app makes one
AdminContext from the objects it built and hands it to the admin dispatcher,
which sets it on each request. It keeps the name req.app, as the public
stages' PublicContext does: one request attribute for what a dispatcher hands
its handlers. A handler that needs something more gets it named here and
passed in by build_app. None of these is replaced while the
node runs; what changes at run time (settings, policy, the bound ports) is
read through the object that owns it, so a handler always sees the current
value.
"""

from collections.abc import Callable
from dataclasses import dataclass

from contentnode.auth.passkeys import Challenges
from contentnode.auth.passwords import PasswordHasher
from contentnode.auth.ratelimit import FailureLimiter
from contentnode.auth.sessions import SessionManager
from contentnode.clock import Clock
from contentnode.config import Config
from contentnode.core.audit import AuditLog
from contentnode.core.backup_runner import BackupRunner
from contentnode.core.events import EventBus
from contentnode.core.folders import FolderRoots
from contentnode.core.geoip import Countries
from contentnode.core.http_pool import OriginPools
from contentnode.core.metrics import NodeMetrics
from contentnode.core.netguard import NodeOutbound
from contentnode.core.notify import Notifier
from contentnode.core.traffic_tail import TrafficTail
from contentnode.core.traffic_top import TrafficTop
from contentnode.fleet.service import Fleet
from contentnode.http.router import RouteTable
from contentnode.services.certificates import Certificates
from contentnode.services.delivery import Delivery
from contentnode.services.domain_checks import DomainChecks
from contentnode.services.updates import UpdateCheck
from contentnode.store import Store
from contentnode.tls import TlsRuntime


@dataclass(frozen=True, slots=True)
class AdminContext:
    """One process's admin side: built once by build_app, shared by every admin request."""

    store: Store                  # the state document: every read, and every write in a transaction
    clock: Clock                  # the injected time (never time.time()): stamps, expiry, lockout windows
    config: Config                # start-up values: the configured ports (api/https.py), log level source, folder roots
    data_dir: str                 # the files a backup exports and a restore replaces (api/backup.py, restore.py)
    audit: AuditLog               # the log GET /api/audit reads; a lockout and a restore write to it
    events: EventBus              # what a change emits for the notifier (login failures, users, a restore)
    metrics: NodeMetrics          # login counters (api/login.py) and GET /metrics (api/system.py)
    sessions: SessionManager      # open, find and end sessions (login, logout, my sessions, users)
    hasher: PasswordHasher        # argon2id: hash and verify passwords (login, me, users)
    login_limiter: FailureLimiter   # the lockout of failed logins by account and address
    apply_policy: Callable[[], None]   # the limiter follows the stored policy again (after a policy write or restore)
    passkey_challenges: Challenges  # WebAuthn challenges waiting for their answer (api/passkeys.py)
    routes: RouteTable            # the routes GET /api/openapi.json describes (api/system.py)
    panel_sections: list          # what GET /api/panel gathers for the web panel (api/panel.py)
    panel_files: dict             # the web panel's static files, read once at start (api/panel_assets.py)
    bound_port: Callable[[str], int | None]   # the port the admin or public listener has now (api/https.py)
    outbound: NodeOutbound        # outbound(): the OutboundPolicy of the moment for checks and tests of targets
    tls: TlsRuntime               # certificates, the HTTPS settings and listener (https, domains, settings)
    delivery: Delivery            # the content engine: cache, traffic, warm, purge, delivery checks
    origin_pools: OriginPools     # kept-alive origin connections a bucket check or probe shares (api/buckets.py)
    folder_roots: FolderRoots     # where folder buckets may serve from (buckets, config apply)
    countries: Countries          # the country database the rule checks and domain edges validate against
    traffic_top: TrafficTop       # the traffic insight's top lists (api/traffic.py)
    traffic_tail: TrafficTail     # the most recent public requests (api/traffic.py)
    notifier: Notifier            # the test notification (api/notifications.py)
    fleet: Fleet                  # the fleet's role, join, keys and status (api/fleet.py, api/fleet_keys.py)
    backups: BackupRunner         # the scheduled backup's runs: "run now" and the status (api/backup_schedule.py)
    domain_checks: DomainChecks   # does a name lead to this node (POST /api/domains/check)
    certificates: Certificates    # install, issue, renew (api/certs.py)
    update_check: UpdateCheck     # the update check, run now or read (api/updates.py)
