"""The rules a bucket record keeps, for the API, backup restore and the CLI alike.

A bucket has a `type`: "s3" (the default; records written before types
existed have none and are S3 buckets) or "folder" (core/folders.py: a folder
inside the start-up value folder_roots). The type is fixed at creation, and
a field of the other type is refused. For S3, an endpoint is
scheme://host[:port] only; a bucket addressed by IP or localhost must use
path-style requests, because its name cannot go in front of an address.
Every broken rule raises FieldError naming the field.
"""

import ipaddress
from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core import folders, netguard
from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.core.s3 import BucketConfig, S3Client
from contentnode.core.s3_origin import S3Origin

TYPES = ("s3", "folder")
S3_FIELDS = {"endpoint", "region", "bucket", "access_key", "secret_key", "path_style"}
FOLDER_FIELDS = {"path"}
FIELDS = {"name", "type"} | S3_FIELDS | FOLDER_FIELDS
BUCKET_NAME = r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]"
REGION = r"[A-Za-z0-9_\-]{1,64}"
KEY_TEXT = r"[\x21-\x7e]+"  # printable ASCII, no spaces
MAX_LENGTHS = {"name": 100, "endpoint": 300, "region": 64, "bucket": 63, "access_key": 128, "secret_key": 256}


def _endpoint(body: dict) -> tuple[str, bool]:
    """(normalised endpoint, whether its host is an address or localhost) from body["endpoint"]."""
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
            raise FieldError(f"endpoint host: {exc}", "endpoint") from None
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}", literal or host == "localhost"


def kind(record: dict) -> str:
    """The bucket's type ("s3" for a record written before types existed)."""
    return record.get("type", "s3")


def record_fields(body: dict, partial: bool, roots: folders.FolderRoots | None = None,
                  of_kind: str | None = None) -> dict:
    """The validated bucket fields present in body (all of its type required unless partial).

    The type is body["type"] (default "s3"), or `of_kind`, the stored record's,
    for a change; `roots` are where a folder's path must lie (None: nowhere).
    """
    if of_kind is None:
        of_kind = v.choice(body, "type", TYPES, default="s3")
    elif body.get("type", of_kind) != of_kind:
        raise FieldError(f"a bucket's type cannot change (this one is {of_kind}); add a new bucket", "type")
    own = FOLDER_FIELDS if of_kind == "folder" else S3_FIELDS
    foreign = sorted((set(body) & (S3_FIELDS | FOLDER_FIELDS)) - own)
    if foreign:
        raise FieldError(f"{foreign[0]} is not a field of {of_kind} buckets", foreign[0])
    required = not partial
    out = {} if partial else {"type": of_kind}
    if "name" in body or required:
        out["name"] = v.text(body, "name", max_len=MAX_LENGTHS["name"])
    if of_kind == "folder":
        if "path" in body or required:
            if roots is None:
                raise FieldError("folder buckets are not available here", "type")
            out["path"] = roots.check_path(body.get("path"))
        return out
    if "endpoint" in body or required:
        out["endpoint"], by_address = _endpoint(body)
        if "path_style" not in body and not partial:
            out["path_style"] = by_address
    if "region" in body or required:
        out["region"] = v.text(body, "region", max_len=MAX_LENGTHS["region"], pattern=REGION)
    if "bucket" in body or required:
        out["bucket"] = v.text(body, "bucket", max_len=MAX_LENGTHS["bucket"], pattern=BUCKET_NAME)
    if "access_key" in body or required:
        out["access_key"] = v.text(body, "access_key", max_len=MAX_LENGTHS["access_key"], pattern=KEY_TEXT)
    if "secret_key" in body or required:
        out["secret_key"] = v.text(body, "secret_key", max_len=MAX_LENGTHS["secret_key"], pattern=KEY_TEXT,
                                   strip=False)
    if "path_style" in body:
        out["path_style"] = v.boolean(body, "path_style", required=True)
    return out


def default_path_style(endpoint: str) -> bool:
    """path_style when a record leaves it out: true for an endpoint given by address or localhost."""
    return _endpoint({"endpoint": endpoint})[1]


def check_record(record: dict) -> None:
    """Cross-field rules of a complete record."""
    if kind(record) != "s3":
        return
    host = urlsplit(record["endpoint"]).hostname
    if not record["path_style"] and (host == "localhost" or _is_address(host)):
        raise FieldError("an endpoint given by address or localhost needs path_style: true "
                      "(the bucket name cannot be put in front of it)", "path_style")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def origin_for(record: dict, roots: folders.FolderRoots, outbound: netguard.OutboundPolicy, clock,
               timeout: float = netguard.DEFAULT_TIMEOUT):
    """The Origin (core/origin.py) a bucket record reads from."""
    if kind(record) == "folder":
        return folders.FolderOrigin(record["path"], roots)
    return S3Origin(S3Client(BucketConfig.from_record(record), outbound, timeout, clock))
