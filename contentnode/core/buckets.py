"""The rules a bucket record keeps, for the API, backup restore and the CLI alike.

A bucket has a `type`: "s3" (the default; records written before types
existed are given it at load), "folder" (core/folders.py: a folder
inside the start-up value folder_roots) or "http" (core/http_bucket.py: an
HTTP(S) site). The type is fixed at creation, and
a field of the other type is refused. For S3, an endpoint is
scheme://host[:port] only; a bucket addressed by IP or localhost must use
path-style requests, because its name cannot go in front of an address.
Every broken rule raises FieldError naming the field.
"""

import dataclasses
import ipaddress
from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core import folders, http_bucket, netguard
from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, url_netloc
from contentnode.core.http_pool import OriginPools
from contentnode.core.keepalive import ConnectionPool
from contentnode.core.records import DERIVED, Field, Record
from contentnode.core.shapes import BOOLEAN, integer, one_of, text

BUCKET_NAME = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
REGION = r"[A-Za-z0-9_\-]{1,64}"
KEY_TEXT = r"[\x21-\x7e]+"  # printable ASCII, no spaces
MAX_LENGTHS = {"name": 100, "endpoint": 300, "region": 64, "bucket": 63, "access_key": 128, "secret_key": 256}


def _endpoint(body: dict) -> str:
    """The normalised endpoint in body["endpoint"]."""
    raw = v.text(body, "endpoint", max_len=MAX_LENGTHS["endpoint"])
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise FieldError(f"endpoint is not a valid URL: {exc}", "endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FieldError("endpoint must be an http:// or https:// URL with a host", "endpoint")
    if parts.username or parts.password or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise FieldError("endpoint must be scheme://host[:port] only (no path, query or credentials)",
                      "endpoint")
    try:
        netloc = url_netloc(parts.hostname, port)
    except HostnameError as exc:
        raise FieldError(f"endpoint host: {exc}", "endpoint") from None
    return f"{parts.scheme}://{netloc}"


def kind(record: dict) -> str:
    """The bucket's type (the load gives "s3" to a record written before types existed)."""
    return record["type"]


def default_path_style(endpoint: str) -> bool:
    """Whether an endpoint's host is an address or localhost: its bucket name cannot go in front."""
    host = urlsplit(endpoint).hostname or ""
    return host == "localhost" or _is_address(host)


def _text(name: str, pattern: str | None = None, strip: bool = True):
    """The record rule of a plain text member: fields.text's trimming, one line, length and pattern."""
    return lambda value: v.text({name: value}, name, max_len=MAX_LENGTHS[name], pattern=pattern, strip=strip)


def _shape(name: str, pattern: str | None = None) -> dict:
    return text(MAX_LENGTHS[name], pattern=None if pattern is None else f"^(?:{pattern})$")


def _field(name: str, pattern: str | None = None, **kw) -> Field:
    return Field(_shape(name, pattern), rule=_text(name, pattern, strip=not kw.get("secret")), **kw)


def record_fields(body: dict, partial: bool, roots: folders.FolderRoots | None = None,
                  of_kind: str | None = None) -> dict:
    """The validated bucket fields present in body (all of its type required unless partial).

    The type is body["type"] (default "s3"), or `of_kind`, the stored record's,
    for a change; `roots` are where a folder's path must lie (None: nowhere).
    """
    if of_kind is None:
        of_kind = v.choice(body, "type", TYPES, default=BUCKET.fields["type"].default)
    elif body.get("type", of_kind) != of_kind:
        raise FieldError(f"a bucket's type cannot change (this one is {of_kind}); add a new bucket", "type")
    own = BUCKET.kinds[of_kind]
    foreign = sorted((set(body) & _KIND_FIELDS) - set(own))
    if foreign:
        raise FieldError(f"{foreign[0]} is not a field of {of_kind} buckets", foreign[0])
    if of_kind == "folder" and roots is None and ("path" in body or not partial):
        raise FieldError("folder buckets are not available here", "type")
    out = {} if partial else {"type": of_kind}
    out.update(BUCKET.read(body, partial, names=["name", *own]))
    if "path" in out and roots is not None:
        out["path"] = roots.check_path(out["path"])
    if "endpoint" in out and "path_style" not in out and not partial:
        out["path_style"] = default_path_style(out["endpoint"])
    if not partial:   # the members of its kind a create leaves out (an http bucket's host_header...)
        out.update({name: f.default for name, f in own.items() if f.filled and name not in out})
    return out


def check_record(record: dict) -> None:
    """Cross-field rules of a complete record."""
    if kind(record) == "s3" and not record["path_style"] and default_path_style(record["endpoint"]):
        raise FieldError("an endpoint given by address or localhost needs path_style: true "
                         "(the bucket name cannot be put in front of it)", "path_style")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


# The members of each type of bucket: a new type is one entry here.
KINDS = {
    "s3": {
        "endpoint": Field(_shape("endpoint"), rule=lambda value: _endpoint({"endpoint": value})),
        "region": _field("region", REGION),
        "bucket": _field("bucket", BUCKET_NAME),
        "access_key": _field("access_key", KEY_TEXT),
        "secret_key": _field("secret_key", KEY_TEXT, secret=True),
        "path_style": Field(BOOLEAN, DERIVED),   # given, or true for an endpoint given by address
    },
    "folder": {
        "path": Field(text(folders.MAX_PATH)),   # inside the folder_roots (FolderRoots.check_path)
    },
    "http": {   # an HTTP(S) site (core/http_bucket.py)
        "url": Field(text(http_bucket.MAX_URL), rule=lambda value: http_bucket.url({"url": value})),
        "host_header": Field(text(253), "origin",
                             rule=lambda value: http_bucket.host_header({"host_header": value})),
        "tls_verify": Field(BOOLEAN, True),
        **{name: Field(integer(lo, hi), default) for name, (lo, hi, default) in http_bucket.TIMEOUTS.items()},
    },
}
TYPES = tuple(KINDS)
# A bucket's record. Its `type` picks the members of its kind (fixed at creation); `last_check` is the
# outcome of the last POST /api/buckets/check, which the node writes. Names are unique ignoring case.
BUCKET = Record("bucket", {
    "name": _field("name"),
    "type": Field(one_of(*TYPES), "s3"),
    "last_check": Field({"type": ["object", "null"]}, None, editable=False),
}, unique=lambda record: record["name"].lower(), by="type", kinds=KINDS, rule=check_record,
                shared=True)
_KIND_FIELDS = frozenset(name for members in BUCKET.kinds.values() for name in members)
FIELDS = frozenset(name for name, f in BUCKET.every().items() if f.editable)   # what a body may give


def origin_policy(outbound: netguard.OutboundPolicy, own_ports) -> netguard.OutboundPolicy:
    """The outbound rule of http origins: loopback and private addresses allowed (an app on the
    same machine or network), the node's own public ports refused as well as its admin port."""
    return dataclasses.replace(outbound, allow_private=True, own_ports=frozenset(own_ports))


def origin_for(record: dict, roots: folders.FolderRoots, outbound: netguard.OutboundPolicy, clock,
               timeout: float = netguard.DEFAULT_TIMEOUT, pool: ConnectionPool | None = None,
               pools: OriginPools | None = None, own_ports=()):
    """The Origin (core/origin.py) a bucket record reads from; an S3 one keeps its connections in `pool`,
    an http one in its origin's pool of `pools` (a fresh set when None), with the record's timeouts.
    The http and S3 engines are imported here: the record's checks (offline commands, restore) need
    neither."""
    if kind(record) == "folder":
        return folders.FolderOrigin(record["path"], roots)
    if kind(record) == "http":
        from contentnode.core.http_origin import HttpOrigin, HttpOriginConfig
        return HttpOrigin(HttpOriginConfig.from_record(record), pools if pools is not None else OriginPools(),
                          origin_policy(outbound, own_ports))
    from contentnode.core.s3 import S3Client
    from contentnode.core.s3_origin import S3Origin
    from contentnode.core.s3_records import BucketConfig
    return S3Origin(S3Client(BucketConfig.from_record(record), outbound, timeout, clock, pool=pool))
