"""The public port: one ordered PIPELINE of stages, the first answer wins.

Each stage is a function `answer(req) -> Response | None` in its own module:
None passes the request on. Before the first stage the dispatcher parses the
Host header and checks the target once (visit.py): every stage reads
`req.visit` and never sees a hostile path. The order is the contract: the
health answer for load balancers comes first (any Host), the verification page
and ACME challenges answer before anything a domain's settings can change,
the HTTPS upgrade before the admin host (which refuses plain HTTP), redirects
before content, and content answers everything that reaches it. Nothing here
reads a request body.
"""

import logging

from contentnode.http.errors import INTERNAL_ERROR, ApiError, error_response
from contentnode.http.request import Deferred
from contentnode.public import (acme_challenge, admin_host, content, domain_redirect, health, https_upgrade,
                                verification, visit)

log = logging.getLogger("contentnode.public")

PIPELINE = [
    health.answer,
    verification.answer,
    acme_challenge.answer,
    https_upgrade.answer,
    admin_host.answer,
    domain_redirect.answer,
    content.answer,
]


class PublicDispatcher:
    """Runs the PIPELINE. `context` (context.py PublicContext) is what a stage reaches as req.app. In a
    public worker the listener's Entry (http/entry.py) has the store follow the daemon's writes first."""

    def __init__(self, context):
        self.context = context

    def again(self, handler, port_name: str):
        """An answer given again without running the PIPELINE (prepared.py), or None."""
        return self.context.prepared.again(handler, port_name)

    def __call__(self, req):
        req.app = self.context
        if req.announces_body():
            req.close_after()  # public requests never have their body read
        try:
            req.visit = visit.parse(req)
        except ApiError as error:
            return error_response(error)
        return self._run(req, PIPELINE)

    def resume(self, req):
        """On a pool thread, a request the listener's loop thread deferred (Request.may_wait): from
        the stage that deferred it, which reads what it kept in `req.waiting`, the clock read again,
        since the request may have waited for a thread; from the start when the state document
        changed meanwhile (a rule, an access list or a domain may be other now)."""
        if req.visit.doc is not self.context.store.data:
            req.waiting = req.deferred_at = None
            return self(req)
        req.visit = req.visit._replace(now=self.context.clock.now())
        return self._run(req, PIPELINE[PIPELINE.index(req.deferred_at):])

    @staticmethod
    def _run(req, stages):
        stage = None
        try:
            for stage in stages:
                response = stage(req)
                if response is not None:
                    return response
            raise ApiError(404, "not_found", "nothing is served here")
        except ApiError as error:
            return error_response(error)
        except (ConnectionError, TimeoutError):
            raise
        except Exception:
            log.exception("public request failed: %s %r", req.method, req.raw_path[:300])
            return error_response(INTERNAL_ERROR)
        except Deferred:
            req.deferred_at = stage
            raise
