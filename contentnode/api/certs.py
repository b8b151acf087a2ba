"""Certificates: POST /api/certs/upload installs a bundle, POST /api/certs/issue orders one over ACME.

The work is services/certificates.py (install, issue, renewal); this module
checks the request, maps the service's errors to answers and audits.
"""

from contentnode.api.domains import HOST, HOST_BODY, existing
from contentnode.core import certs
from contentnode.core import fields as v
from contentnode.core.acme import AcmeError
from contentnode.http.errors import ApiError, invalid
from contentnode.http.response import json_response
from contentnode.http.router import Route
from contentnode.http.schema import obj, text
from contentnode.services.certificates import CertificateError, PreflightFailed


def _answer(host: str, info: dict) -> dict:
    return dict(info, host=host)


def _refused(exc: CertificateError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message)


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
    try:
        info = req.app.certificates.install(host, bundle, "upload")
    except CertificateError as exc:
        raise _refused(exc) from None
    req.audit("cert.upload", target=host, detail={"fingerprint": info["fingerprint"]})
    return _answer(host, info)


def issue_cert(req):
    body = req.body
    host = v.host(body)
    existing(req, host)
    try:
        info = req.app.certificates.issue(host)
    except PreflightFailed as exc:
        req.audit("cert.issue", target=host, ok=False, detail={"step": "domain_check"})
        return json_response({"error": {"code": "domain_check_failed", "field": "host",
                                        "message": f"{host} does not reach this node yet; see steps"},
                              "steps": exc.steps}, 409)
    except CertificateError as exc:
        raise _refused(exc) from None
    except AcmeError as exc:
        req.audit("cert.issue", target=host, ok=False, detail={"step": exc.step})
        raise ApiError(502, "acme_failed", f"ACME {exc.step}: {exc.message}") from None
    req.audit("cert.issue", target=host, detail={"fingerprint": info["fingerprint"]})
    return _answer(host, info)


_PEM = text(60000)
UPLOAD_BODY = obj({"host": HOST, "cert_pem": _PEM, "key_pem": _PEM}, required=["host", "cert_pem", "key_pem"])

ROUTES = [
    Route("POST", "/api/certs/upload", "domains:write", upload_cert, body=UPLOAD_BODY,
          fleet_shared=True),
    Route("POST", "/api/certs/issue", "domains:write", issue_cert, body=HOST_BODY, upstream=True,
          fleet_shared=True),
]
