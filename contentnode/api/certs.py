"""Certificates: upload a bundle, or issue one over ACME HTTP-01; renew in the background.

Both paths end in `install`: the bundle is validated, written to the store
(key and chain in one 0600 file) and summarised on the domain record; the TLS
listener uses it for the next connection. Issuance first runs the domain check
so a name that does not reach this node is refused with the failing steps
instead of burning an ACME order.
"""

import functools
import logging
import os
import threading

from contentnode.core import fields as v
from contentnode.api.domains import HOST, HOST_BODY, existing, run_check
from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core import certs, netguard, settings
from contentnode.core.acme import AcmeClient, AcmeError, load_account_key
from contentnode.core.renewal import Renewer
from contentnode.http.errors import ApiError, conflict, invalid, not_found
from contentnode.http.response import json_response
from contentnode.http.router import Route
from contentnode.http.schema import obj, text

log = logging.getLogger("contentnode.certs")

RENEWAL_INTERVAL = 3600
ACME_TIMEOUT = 30


class PreflightFailed(Exception):
    """The domain check failed before an ACME order; carries its steps."""

    def __init__(self, steps):
        super().__init__("domain check failed")
        self.steps = steps


def install(app, host: str, bundle: certs.Bundle, source: str) -> dict:
    """Store a validated bundle for host and record its summary; returns the summary."""
    info = dict(certs.summary(bundle.leaf), source=source, installed_at=rfc3339(app.clock.now()))
    app.tls.certs.save(host, bundle)
    with app.store.transaction() as doc:
        record = doc["domains"].get(host)
        if record is None:
            app.tls.certs.delete(host)
            raise not_found(f"domain {host} was deleted meanwhile")
        record["certificate"] = info
        record["updated_at"] = info["installed_at"]
    return info


def _answer(host: str, info: dict) -> dict:
    return dict(info, host=host)


def upload_cert(req):
    body = req.body
    host = v.host(body)
    for name in ("cert_pem", "key_pem"):
        v.text(body, name, max_len=60000, strip=False, single_line=False)  # PEM text is multi-line
    existing(req, host)
    try:
        bundle = certs.validate_bundle(host, body["cert_pem"], body["key_pem"], req.app.clock.now())
    except certs.CertError as exc:
        raise invalid(str(exc), exc.field) from None
    info = install(req.app, host, bundle, "upload")
    req.audit("cert.upload", target=host, detail={"fingerprint": info["fingerprint"]})
    return _answer(host, info)


def issue_certificate(app, host: str) -> dict:
    """Pre-flight check, ACME order, install. PreflightFailed or AcmeError on failure."""
    with app.tls.issuing_lock:
        if host in app.tls.issuing:
            raise conflict("in_progress", f"a certificate for {host} is already being issued")
        app.tls.issuing.add(host)
    try:
        steps = run_check(app, host)
        if not steps.ok:
            raise PreflightFailed(steps.items)
        effective = settings.effective(app.store.data)
        account_key = load_account_key(os.path.join(app.data_dir, "acme", "account.pem"))
        fetch = functools.partial(netguard.fetch, policy=app.outbound, timeout=ACME_TIMEOUT)
        client = AcmeClient(effective["acme_directory"], account_key, fetch, contact=effective["acme_email"])
        cert_key, key_pem = certs.new_key_pem()
        chain_pem = client.issue([host], app.tls.challenges, cert_key)
        try:
            bundle = certs.validate_bundle(host, chain_pem, key_pem, app.clock.now())
        except certs.CertError as exc:
            raise AcmeError("download", f"the CA's certificate is unusable: {exc}") from None
        return install(app, host, bundle, "acme")
    finally:
        with app.tls.issuing_lock:
            app.tls.issuing.discard(host)


def issue_cert(req):
    body = req.body
    host = v.host(body)
    existing(req, host)
    try:
        info = issue_certificate(req.app, host)
    except PreflightFailed as exc:
        req.audit("cert.issue", target=host, ok=False, detail={"step": "domain_check"})
        return json_response({"error": {"code": "domain_check_failed", "field": "host",
                                        "message": f"{host} does not reach this node yet; see steps"},
                              "steps": exc.steps}, 409)
    except AcmeError as exc:
        req.audit("cert.issue", target=host, ok=False, detail={"step": exc.step})
        raise ApiError(502, "acme_failed", f"ACME {exc.step}: {exc.message}") from None
    req.audit("cert.issue", target=host, detail={"fingerprint": info["fingerprint"]})
    return _answer(host, info)


def _certificates(app):
    for host, record in app.store.data["domains"].items():
        info = record.get("certificate")
        if info:
            yield host, parse_rfc3339(info["not_after"]), info.get("source") == "acme"


def _renew(app, host):
    try:
        issue_certificate(app, host)
    except PreflightFailed as exc:
        failed = next(step for step in exc.steps if not step["ok"])
        raise RuntimeError(f"domain check failed at {failed['name']}: {failed['detail']}") from None
    except ApiError as exc:
        raise RuntimeError(exc.message) from None
    app.audit.record("cert.renew", target=host)


def start_renewal(app):
    """A first renewal pass right away (a node that was down may be late), then a daily job."""
    app.metrics.watch_certificates(functools.partial(_certificates, app))
    renewer = Renewer(functools.partial(_certificates, app), functools.partial(_renew, app), app.events.emit)

    def run():
        try:
            renewer.run_once(app.clock.now())
        except Exception:
            log.exception("certificate renewal pass failed")

    threading.Thread(target=run, name="cert-renewal-first", daemon=True).start()
    app.every(RENEWAL_INTERVAL, run, "cert-renewal")


_PEM = text(60000)
UPLOAD_BODY = obj({"host": HOST, "cert_pem": _PEM, "key_pem": _PEM}, required=["host", "cert_pem", "key_pem"])

ROUTES = [
    Route("POST", "/api/certs/upload", "domains:write", upload_cert, body=UPLOAD_BODY,
          fleet_shared=True),
    Route("POST", "/api/certs/issue", "domains:write", issue_cert, body=HOST_BODY, upstream=True,
          fleet_shared=True),
]
