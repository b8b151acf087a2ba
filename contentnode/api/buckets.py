"""Buckets: the origins content comes from, S3-compatible buckets, folders on the node, HTTP(S) sites.

An S3 bucket record holds where the bucket lives and the credentials to sign
for it; the secret key is write-only: answers say "secret_key_set". A folder
bucket holds a path inside the folder_roots. An http bucket holds a url, its
Host policy, TLS verification and timeouts; its address passes the origin
outbound guard at save (and again at every connect). Check runs the steps an
operator needs to find a mistake (for S3: resolve, connect and TLS,
authenticate, list; for a folder: resolve, open, list; for http: resolve,
connect, TLS, a request); test fetches one object's metadata and first
bytes. Both go through the record's Origin (core/origin.py).
"""

import secrets

from contentnode.core import fields as v
from contentnode.clock import rfc3339
from contentnode.core import buckets, http_bucket, revisions, rules
from contentnode.http.errors import conflict, invalid, not_found
from contentnode.http.response import created, no_content
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, obj, refused, text

MAX_BUCKETS = 1000


def public_view(record: dict) -> dict:
    """The record as answers show it: an S3 secret replaced by secret_key_set."""
    view = {k: val for k, val in record.items() if k not in _SECRETS}
    if record["type"] == "s3":
        view["secret_key_set"] = bool(record["secret_key"])
    return view


def _unique_name(doc: dict, record: dict, own_id: str | None = None) -> None:
    other_id = buckets.BUCKET.clash(doc["buckets"], record, own_id)
    if other_id is not None:
        raise conflict("conflict", f"a bucket named {record['name']!r} already exists", "name",
                       refs=[{"type": "bucket", "id": other_id}])


def existing(doc: dict, bucket_id: str) -> dict:
    record = doc["buckets"].get(bucket_id)
    if record is None:
        raise not_found(f"no bucket with id {bucket_id!r}")
    return record


def list_buckets(req):
    records = sorted(req.app.store.data["buckets"].values(), key=lambda b: (b["name"].lower(), b["id"]))
    return {"buckets": [public_view(b) for b in records], "folder_roots": req.app.folder_roots.roots}


def get_bucket(req):
    return public_view(existing(req.app.store.data, req.params["id"]))


def guard(app, record: dict) -> None:
    """An http bucket's origin may not be the node itself nor a link-local/metadata address."""
    if record["type"] == "http":
        http_bucket.guard(record["url"], buckets.origin_policy(app.outbound(), app.tls.own_ports()))


def create_bucket(req):
    body = req.body
    record = buckets.record_fields(body, partial=False, roots=req.app.folder_roots)
    buckets.check_record(record)
    guard(req.app, record)
    stamp = rfc3339(req.app.clock.now())
    record = {"id": secrets.token_hex(6), **buckets.BUCKET.defaults(), **record, "created_at": stamp,
              "updated_at": stamp}
    with req.app.store.transaction() as doc:
        if len(doc["buckets"]) >= MAX_BUCKETS:
            raise conflict("conflict", f"a node holds at most {MAX_BUCKETS} buckets")
        _unique_name(doc, record)
        doc["buckets"][record["id"]] = record
    where = {"path": record["path"]} if record["type"] == "folder" else \
        {"url": record["url"]} if record["type"] == "http" else {"bucket": record["bucket"]}
    req.audit("bucket.create", target=record["id"], detail={"name": record["name"], **where})
    return created(_with_fleet_warnings(req, public_view(record)))


def update_bucket(req):
    bucket_id = req.params["id"]
    with req.app.store.transaction() as doc:
        record = existing(doc, bucket_id)
        revisions.require(f"bucket {bucket_id}", revisions.of(record), req.if_match)
        changes = buckets.record_fields(req.body, partial=True, roots=req.app.folder_roots,
                                        of_kind=record["type"])
        before = dict(record)
        record.update(changes)
        buckets.check_record(record)
        if "url" in changes:
            guard(req.app, record)
        if "name" in changes:
            _unique_name(doc, record, bucket_id)
        if any(before.get(key) != value for key, value in changes.items() if key != "name"):
            record["last_check"] = None  # the last check was of another configuration
        revisions.stamp_if_changed(record, before, rfc3339(req.app.clock.now()))
    req.audit("bucket.update", target=bucket_id, detail={"fields": sorted(changes)})
    return _with_fleet_warnings(req, public_view(record))


def _with_fleet_warnings(req, view: dict) -> dict:
    """A fleet primary's answer names the replicas that will refuse its buckets now (a folder
    outside their folder_roots), so the change does not fail silently on them."""
    found = req.app.fleet.folder_warnings()
    return dict(view, fleet_warnings=found) if found else view


def delete_bucket(req):
    bucket_id = req.params["id"]
    with req.app.store.transaction() as doc:
        revisions.require(f"bucket {bucket_id}", revisions.of(existing(doc, bucket_id)), req.if_match)
        users = rules.rules_using(doc, "bucket", bucket_id)
        if users:
            raise conflict("in_use", f"bucket {bucket_id} is used by rules {', '.join(users)}; delete them first",
                           refs=rules.rule_refs(users))
        del doc["buckets"][bucket_id]
    req.audit("bucket.delete", target=bucket_id)
    return no_content()


def origin_for(app, record: dict):
    return buckets.origin_for(record, app.folder_roots, app.outbound(), app.clock.now, pools=app.origin_pools,
                              own_ports=app.tls.own_ports())


def _target(req) -> tuple[str | None, dict]:
    """(stored id or None, the complete record to use) for check and test bodies.

    With "id", the stored record, overlaid by any fields given (to try new
    credentials before saving); without it, a complete definition.
    """
    body = req.body
    roots = req.app.folder_roots
    bucket_id = v.text(body, "id", required=False, max_len=64)
    definition = {k: val for k, val in body.items() if k in buckets.FIELDS}
    if bucket_id is None:
        record = buckets.record_fields(dict(definition, name=definition.get("name", "unsaved")), partial=False,
                                       roots=roots)
    else:
        record = dict(existing(req.app.store.data, bucket_id))
        record.update(buckets.record_fields(definition, partial=True, roots=roots, of_kind=record["type"]))
    buckets.check_record(record)
    return bucket_id, record


def _where(record: dict) -> str:
    """What an audit entry names for an unsaved definition: its endpoint, folder or url."""
    return record[{"folder": "path", "http": "url"}.get(record["type"], "endpoint")]


def check_bucket(req):
    bucket_id, record = _target(req)
    report = origin_for(req.app, record).check()
    overlaid = bool(set(req.body) & buckets.FIELDS)
    if bucket_id is not None and not overlaid:
        _record_check(req.app, bucket_id, record["name"], report)
    req.audit("bucket.check", target=bucket_id or _where(record), ok=report["ok"])
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
    body = req.body
    key = v.text(body, "key", max_len=1024, strip=False)
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise invalid("key must not contain control characters", "key")
    bucket_id, record = _target(req)
    result = origin_for(req.app, record).probe(key)
    req.audit("bucket.test", target=bucket_id or _where(record), ok=result["ok"], detail={"key": key[:200]})
    return {"id": bucket_id, "key": key, **result}


def _panel_buckets(req):
    return list_buckets(req)["buckets"]


PANEL_SECTIONS = [("buckets", "buckets:read", _panel_buckets)]

_SECRETS = buckets.BUCKET.secrets()
_ID = text(64)
_BY_TYPE = ('type "s3" (the default) needs endpoint, region, bucket, access_key and secret_key '
            '(path_style optional); type "folder" needs path, a folder inside the folder_roots; type "http" '
            'needs url (http(s)://host[:port][/path]), with host_header ("origin", "client" or a host name), '
            'tls_verify, connect_timeout and read_timeout (seconds) optional')
CREATE_BODY = buckets.BUCKET.body(create=True, description=_BY_TYPE)
UPDATE_BODY = buckets.BUCKET.body(create=False, description="the fields of the bucket's type; the type itself "
                                                            "never changes")
CHECK_BODY = obj(dict(CREATE_BODY["properties"], id=_ID),
                 description="id: a stored bucket, overlaid by the fields given; without id, a complete "
                             "definition: " + _BY_TYPE)
TEST_BODY = obj(dict(CHECK_BODY["properties"], key=text(1024)), required=["key"],
                description=CHECK_BODY["description"])

BUCKET = buckets.BUCKET.answer({"id": STRING, "secret_key_set": BOOLEAN, "secret_key": refused("is write-only"),
                                "created_at": STRING, "updated_at": STRING,
                                "fleet_warnings": {"type": "array", "items": STRING}},
                               optional=("secret_key_set", "secret_key", "created_at", "updated_at", "fleet_warnings"))

ROUTES = [
    Route("GET", "/api/buckets", "buckets:read", list_buckets,
          answer=answer({"buckets": {"type": "array", "items": BUCKET}, "folder_roots": {"type": "array", "items": STRING}})),
    Route("POST", "/api/buckets", "buckets:write", create_bucket, status=201, body=CREATE_BODY, answer=BUCKET,
          fleet_shared=True),
    Route("POST", "/api/buckets/check", "buckets:write", check_bucket, body=CHECK_BODY),
    Route("POST", "/api/buckets/test", "buckets:write", try_object, body=TEST_BODY),
    Route("GET", "/api/buckets/{id}", "buckets:read", get_bucket, answer=BUCKET),
    Route("PUT", "/api/buckets/{id}", "buckets:write", update_bucket, body=UPDATE_BODY, answer=BUCKET, if_match=True,
          fleet_shared=True),
    Route("DELETE", "/api/buckets/{id}", "buckets:write", delete_bucket, status=204, if_match=True,
          fleet_shared=True),
]
