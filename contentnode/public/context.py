"""What a public stage reaches as req.app: the collaborators the composition root hands the public port.

The stages of the pipeline (public/__init__.py) read only these, never the
App, so the public path goes http -> public -> services -> core without
climbing into the composition root. A stage that needs something more gets
it named here and passed in by app.py build_app.
"""

import threading
from dataclasses import dataclass

from contentnode.auth.gate import AdminGate
from contentnode.clock import Clock
from contentnode.core.geoip import Countries
from contentnode.core.metrics import NodeMetrics
from contentnode.fleet.challenges import ReadThrough
from contentnode.http.router import AdminDispatcher
from contentnode.public.insight import Insight
from contentnode.public.prepared import PreparedAnswers
from contentnode.services.delivery import Delivery
from contentnode.store import Store
from contentnode.tls import TlsRuntime


@dataclass(frozen=True, slots=True)
class PublicContext:
    """One process's public side: built once by build_app, shared by every public listener."""

    store: Store                  # the state document each request begins with (public/visit.py)
    clock: Clock
    delivery: Delivery            # the content engine (services/delivery.py): cache, traffic, rate table
    metrics: NodeMetrics
    prepared: PreparedAnswers     # memory hits given again (public/prepared.py)
    insight: Insight              # where a request is counted for the traffic insight (public/insight.py)
    countries: Countries          # the country database of the edge checks (public/edge_guard.py)
    draining: threading.Event     # set on SIGTERM: /healthz answers 503 (public/health.py)
    tls: TlsRuntime               # certificates, pending challenges, the HTTPS settings and listener
    acme_read_through: ReadThrough   # challenges another fleet node published (public/acme_challenge.py)
    admin_gate: AdminGate         # which Host is the admin host (public/admin_host.py)
    admin_dispatcher: AdminDispatcher   # where the admin host's requests go, with an AdminContext as their req.app
