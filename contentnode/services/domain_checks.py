"""The domain check run for a host: does the name lead to this node? Its outcome is stored.

POST /api/domains/check runs it, and so does every certificate order before it
asks the CA (services/certificates.py), so a name that does not reach this
node never burns an ACME order.
"""

from contentnode.clock import rfc3339
from contentnode.core import domaincheck, settings
from contentnode.core.steps import Steps


class DomainChecks:
    """Runs core/domaincheck.py against this node's public side and records the outcome.

    public_port(): the port the public listener is bound to (the check's target unless the
    public_port setting names another); outbound(): the outbound policy of the moment.
    """

    def __init__(self, store, clock, events, outbound, public_port):
        self.store, self.clock, self.events = store, clock, events
        self._outbound, self._public_port = outbound, public_port

    def target(self) -> tuple:
        """(scheme, port) the check uses: settings, else the public listener's own port."""
        effective = settings.effective(self.store.data)
        return effective["public_scheme"], effective["public_port"] or self._public_port()

    def run(self, host: str) -> Steps:
        """Check host, record the outcome on its record, raise domain_check_failed on failure."""
        scheme, port = self.target()
        secret = bytes.fromhex(self.store.data["node"]["secret"])
        steps = domaincheck.check_domain(host, scheme, port, secret, self._outbound())
        stamp = rfc3339(self.clock.now())
        with self.store.transaction() as doc:
            record = doc["domains"].get(host)
            if record is not None:
                record["status"] = "verified" if steps.ok else "failed"
                record["last_check"] = {"ok": steps.ok, "at": stamp, "steps": steps.items}
                record["updated_at"] = stamp
        if not steps.ok:
            failed = next(step for step in steps.items if not step["ok"])
            self.events.emit("domain_check_failed", host=host, step=failed["name"], detail=failed["detail"])
        return steps
