"""Buckets: the S3-compatible origins content comes from.

A bucket record holds where the bucket lives and the credentials to sign for
it. The secret key is write-only: answers say "secret_key_set". Check runs
the steps an operator needs to find a mistake (resolve, connect and TLS,
authenticate, list); test fetches one object's metadata and first bytes.
"""

import ipaddress
import secrets
from urllib.parse import urlsplit

from contentnode.api import validate as v
from contentnode.clock import rfc3339
from contentnode.core import s3
from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.http.errors import conflict, invalid, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route

MAX_BUCKETS = 1000
FIELDS = {"name", "endpoint", "region", "bucket", "access_key", "secret_key", "path_style"}
_BUCKET_NAME = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
_REGION = r"[A-Za-z0-9_\-]{1,64}"
_KEY_TEXT = r"[\x21-\x7e]+"  # printable ASCII, no spaces


def public_view(record: dict) -> dict:
    """The record as answers show it: the secret replaced by secret_key_set."""
    view = {k: val for k, val in record.items() if k != "secret_key"}
    view["secret_key_set"] = bool(record.get("secret_key"))
    return view


def _endpoint(body: dict) -> tuple[str, bool]:
    """(normalised endpoint, whether its host is an address or localhost) from body["endpoint"]."""
    raw = v.text(body, "endpoint", max_len=300)
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise invalid(f"endpoint is not a valid URL: {exc}", "endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid("endpoint must be an http:// or https:// URL with a host", "endpoint")
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise invalid("endpoint must be scheme://host[:port] only (no path, query or credentials)",
                      "endpoint")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
        literal = True
        host = f"[{address}]" if address.version == 6 else str(address)
    except ValueError:
        literal = False
        try:
            host = normalize_host(host)
        except HostnameError as exc:
            raise invalid(f"endpoint host: {exc}", "endpoint") from None
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}", literal or host == "localhost"


def _fields(body: dict, partial: bool) -> dict:
    """The validated bucket fields present in body (all required unless partial)."""
    required = not partial
    out = {}
    if "name" in body or required:
        out["name"] = v.text(body, "name", max_len=100)
    if "endpoint" in body or required:
        out["endpoint"], by_address = _endpoint(body)
        if "path_style" not in body and not partial:
            out["path_style"] = by_address
    if "region" in body or required:
        out["region"] = v.text(body, "region", max_len=64, pattern=_REGION)
    if "bucket" in body or required:
        out["bucket"] = v.text(body, "bucket", max_len=63, pattern=_BUCKET_NAME)
    if "access_key" in body or required:
        out["access_key"] = v.text(body, "access_key", max_len=128, pattern=_KEY_TEXT)
    if "secret_key" in body or required:
        out["secret_key"] = v.text(body, "secret_key", max_len=256, pattern=_KEY_TEXT, strip=False)
    if "path_style" in body:
        out["path_style"] = v.boolean(body, "path_style", required=True)
    return out


def _check_record(record: dict) -> None:
    """Cross-field rules of a complete record."""
    host = urlsplit(record["endpoint"]).hostname
    if not record["path_style"] and (host == "localhost" or _is_address(host)):
        raise invalid("an endpoint given by address or localhost needs path_style: true "
                      "(the bucket name cannot be put in front of it)", "path_style")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _unique_name(doc: dict, name: str, own_id: str | None = None) -> None:
    for other_id, other in doc["buckets"].items():
        if other_id != own_id and other["name"].lower() == name.lower():
            raise conflict("conflict", f"a bucket named {name!r} already exists", "name")


def rules_using(doc: dict, bucket_id: str) -> list:
    return sorted(rid for rid, rule in (doc.get("rules") or {}).items() if rule.get("bucket") == bucket_id)


def existing(doc: dict, bucket_id: str) -> dict:
    record = doc["buckets"].get(bucket_id)
    if record is None:
        raise not_found(f"no bucket with id {bucket_id!r}")
    return record


def list_buckets(req):
    records = sorted(req.app.store.data["buckets"].values(), key=lambda b: (b["name"].lower(), b["id"]))
    return {"buckets": [public_view(b) for b in records]}


def get_bucket(req):
    return public_view(existing(req.app.store.data, req.params["id"]))


def create_bucket(req):
    body = v.require_object(req.body)
    v.only(body, FIELDS)
    record = _fields(body, partial=False)
    _check_record(record)
    stamp = rfc3339(req.app.clock.now())
    record = {"id": secrets.token_hex(6), **record, "created_at": stamp, "updated_at": stamp,
              "last_check": None}
    with req.app.store.transaction() as doc:
        if len(doc["buckets"]) >= MAX_BUCKETS:
            raise conflict("conflict", f"a node holds at most {MAX_BUCKETS} buckets")
        _unique_name(doc, record["name"])
        doc["buckets"][record["id"]] = record
    req.audit("bucket.create", target=record["id"], detail={"name": record["name"], "bucket": record["bucket"]})
    return created(public_view(record))


def update_bucket(req):
    body = v.require_object(req.body)
    v.only(body, FIELDS)
    changes = _fields(body, partial=True)
    bucket_id = req.params["id"]
    with req.app.store.transaction() as doc:
        record = existing(doc, bucket_id)
        record.update(changes)
        _check_record(record)
        if "name" in changes:
            _unique_name(doc, record["name"], bucket_id)
        record["updated_at"] = rfc3339(req.app.clock.now())
        if changes.keys() - {"name"}:
            record["last_check"] = None  # the last check was of another configuration
    req.audit("bucket.update", target=bucket_id, detail={"fields": sorted(changes)})
    return public_view(record)


def delete_bucket(req):
    bucket_id = req.params["id"]
    with req.app.store.transaction() as doc:
        existing(doc, bucket_id)
        users = rules_using(doc, bucket_id)
        if users:
            raise conflict("in_use", f"bucket {bucket_id} is used by rules {', '.join(users)}; delete them first")
        del doc["buckets"][bucket_id]
    req.audit("bucket.delete", target=bucket_id)
    return no_content()


def client_for(app, record: dict) -> s3.S3Client:
    return s3.S3Client(s3.BucketConfig.from_record(record), app.outbound, clock=app.clock.now)


def _target(req, allowed: set) -> tuple[str | None, dict]:
    """(stored id or None, the complete record to use) for check and test bodies.

    With "id", the stored record, overlaid by any fields given (to try new
    credentials before saving); without it, a complete definition.
    """
    body = v.require_object(req.body)
    v.only(body, allowed)
    bucket_id = v.text(body, "id", required=False, max_len=64)
    definition = {k: val for k, val in body.items() if k in FIELDS}
    if bucket_id is None:
        record = _fields(dict(definition, name=definition.get("name", "unsaved")), partial=False)
    else:
        record = dict(existing(req.app.store.data, bucket_id))
        record.update(_fields(definition, partial=True))
    _check_record(record)
    return bucket_id, record


def check_bucket(req):
    bucket_id, record = _target(req, FIELDS | {"id"})
    report = s3.check_bucket(client_for(req.app, record))
    overlaid = bool(set(req.body) & FIELDS)
    if bucket_id is not None and not overlaid:
        _record_check(req.app, bucket_id, record["name"], report)
    req.audit("bucket.check", target=bucket_id or record["endpoint"], ok=report["ok"])
    return {"id": bucket_id, **report}


def _record_check(app, bucket_id: str, name: str, report: dict) -> None:
    failed = next((step for step in report["steps"] if not step["ok"]), None)
    summary = {"ok": report["ok"], "at": rfc3339(app.clock.now()),
               "failed_step": failed["name"] if failed else None, "detail": failed["detail"] if failed else None}
    with app.store.transaction() as doc:
        if bucket_id in doc["buckets"]:
            doc["buckets"][bucket_id]["last_check"] = summary
    if failed:
        app.events.emit("bucket_check_failed", id=bucket_id, name=name, step=failed["name"],
                        detail=failed["detail"])


def try_object(req):
    body = v.require_object(req.body)
    key = v.text(body, "key", max_len=1024, strip=False)
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise invalid("key must not contain control characters", "key")
    bucket_id, record = _target(req, FIELDS | {"id", "key"})
    result = s3.probe_object(client_for(req.app, record), key)
    req.audit("bucket.test", target=bucket_id or record["endpoint"], ok=result["ok"], detail={"key": key[:200]})
    return {"id": bucket_id, "key": key, **result}


def _panel_buckets(req):
    return list_buckets(req)["buckets"]


SECTIONS = {"buckets": dict}
PANEL_SECTIONS = [("buckets", "buckets:read", _panel_buckets)]

ROUTES = [
    Route("GET", "/api/buckets", "buckets:read", list_buckets),
    Route("POST", "/api/buckets", "buckets:write", create_bucket),
    Route("POST", "/api/buckets/check", "buckets:write", check_bucket),
    Route("POST", "/api/buckets/test", "buckets:write", try_object),
    Route("GET", "/api/buckets/{id}", "buckets:read", get_bucket),
    Route("PUT", "/api/buckets/{id}", "buckets:write", update_bucket),
    Route("DELETE", "/api/buckets/{id}", "buckets:write", delete_bucket),
]
