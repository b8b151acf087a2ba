"""Certificates: install a bundle, issue one over ACME HTTP-01, renew them in the background.

Both ways end in `install`: the bundle is validated, written to the store
(key and chain in one 0600 file) and summarised on the domain record; the TLS
listener uses it for the next connection. Issuance first runs the domain check
(services/domain_checks.py), so a name that does not reach this node is refused
with the failing steps instead of burning an ACME order. In a fleet the primary
orders under the host's issuer lease (fleet/issuer.py). Failures are this
module's CertificateError kinds or core's AcmeError; api/certs.py maps them to
its answers, and the renewal job reports them as cert_renewal_failed.
"""

import functools
import os

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core import certs, netguard, settings
from contentnode.core.acme import AcmeClient, AcmeError, load_account_key
from contentnode.core.renewal import Renewer
from contentnode.fleet import issuer as fleet_issuer
from contentnode.fleet.lease import LeaseHeld
from contentnode.fleet.wire import Refused
from contentnode.services.jobs import Every

RENEWAL_INTERVAL = 3600
ACME_TIMEOUT = 30


class CertificateError(Exception):
    """No certificate was installed: `status` and `code` say how the API answers, `message` why."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class PreflightFailed(CertificateError):
    """The domain check failed before an ACME order; carries its steps."""

    def __init__(self, steps: list):
        failed = next(step for step in steps if not step["ok"])
        super().__init__(409, "domain_check_failed",
                         f"domain check failed at {failed['name']}: {failed['detail']}")
        self.steps = steps


class Certificates:
    """The certificates of this node's domains, kept in tls.certs and summarised in the store."""

    def __init__(self, store, clock, tls, fleet, domain_checks, data_dir: str, outbound):
        self.store, self.clock, self.tls, self.fleet = store, clock, tls, fleet
        self.domain_checks, self.data_dir, self._outbound = domain_checks, data_dir, outbound

    def install(self, host: str, bundle: certs.Bundle, source: str) -> dict:
        """Store a validated bundle for host and record its summary; returns the summary."""
        info = dict(certs.summary(bundle.leaf), source=source, installed_at=rfc3339(self.clock.now()))
        self.tls.certs.save(host, bundle)
        with self.store.transaction() as doc:
            record = doc["domains"].get(host)
            if record is None:
                self.tls.certs.delete(host)
                raise CertificateError(404, "not_found", f"domain {host} was deleted meanwhile")
            record["certificate"] = info
            record["updated_at"] = info["installed_at"]
        return info

    def issue(self, host: str) -> dict:
        """Pre-flight check, ACME order, install. PreflightFailed, CertificateError or AcmeError on failure.

        In a fleet the primary orders under the host's issuer lease where the bucket allows
        one, and answers a certificate that appeared meanwhile instead of ordering again
        (fleet/issuer.py); its HTTP-01 answers reach every node through the bucket."""
        tls = self.tls
        with tls.issuing_lock:
            if host in tls.issuing:
                raise CertificateError(409, "in_progress", f"a certificate for {host} is already being issued")
            tls.issuing.add(host)
        before = ((self.store.data["domains"].get(host) or {}).get("certificate") or {}).get("fingerprint")
        try:
            steps = self.domain_checks.run(host)
            if not steps.ok:
                raise PreflightFailed(steps.items)
            with fleet_issuer.ordering(self.fleet, host, before) as already:
                if already is not None:
                    return already
                return self._order(host)
        except LeaseHeld as exc:
            raise CertificateError(409, "in_progress", f"node {exc.holder or 'another node'} is ordering a "
                                                       f"certificate for {host} (it holds the fleet's issuer "
                                                       "lease)") from None
        except Refused as exc:
            raise CertificateError(409, exc.code, exc.message) from None
        finally:
            with tls.issuing_lock:
                tls.issuing.discard(host)

    def _order(self, host: str) -> dict:
        effective = settings.effective(self.store.data)
        account_key = load_account_key(os.path.join(self.data_dir, "acme", "account.pem"))
        fetch = functools.partial(netguard.fetch, policy=self._outbound(), timeout=ACME_TIMEOUT)
        client = AcmeClient(effective["acme_directory"], account_key, fetch, contact=effective["acme_email"])
        cert_key, key_pem = certs.new_key_pem()
        chain_pem = client.issue([host], fleet_issuer.challenge_store(self.fleet, self.tls.challenges), cert_key)
        try:
            bundle = certs.validate_bundle(host, chain_pem, key_pem, self.clock.now())
        except certs.CertError as exc:
            raise AcmeError("download", f"the CA's certificate is unusable: {exc}") from None
        return self.install(host, bundle, "acme")

    def installed(self):
        """(host, not_after epoch, renewable) of every installed certificate (ACME ones renew)."""
        for host, record in self.store.data["domains"].items():
            info = record.get("certificate")
            if info:
                yield host, parse_rfc3339(info["not_after"]), info.get("source") == "acme"

    def renewal(self, events, audit) -> Every:
        """The renewal job: a first pass right away (a node that was down may be late), then hourly."""
        renewer = Renewer(self._renewable, functools.partial(self._renew, audit), events.emit)
        return Every("cert-renewal", RENEWAL_INTERVAL, lambda: renewer.run_once(self.clock.now()), at_start=True)

    def _renewable(self):
        """What the renewer renews and warns about: nothing on a fleet replica, whose primary renews
        once for the fleet and warns about a replica's certificate only when it differs from its own
        (fleet/alerts.py), so one expiring certificate is one notification, not one per node."""
        if self.fleet.primary_of_replica() is not None:
            return
        yield from self.installed()

    def _renew(self, audit, host: str) -> None:
        self.issue(host)
        audit.record("cert.renew", target=host)
