"""The rules a bucket record keeps, for the API, backup restore and the CLI alike.

An endpoint is scheme://host[:port] only; a bucket addressed by IP or
localhost must use path-style requests, because its name cannot go in front
of an address. Every broken rule raises FieldError naming the field.
"""

import ipaddress
from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, normalize_host

FIELDS = {"name", "endpoint", "region", "bucket", "access_key", "secret_key", "path_style"}
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


def record_fields(body: dict, partial: bool) -> dict:
    """The validated bucket fields present in body (all required unless partial)."""
    required = not partial
    out = {}
    if "name" in body or required:
        out["name"] = v.text(body, "name", max_len=MAX_LENGTHS["name"])
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


def check_record(record: dict) -> None:
    """Cross-field rules of a complete record."""
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


