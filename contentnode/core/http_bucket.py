"""The fields of an http bucket (core/buckets.py asks here), and the outbound guard at save.

`url` is http(s)://host[:port][/base/path]: no query, fragment or
credentials; stored normalised (scheme and host lower-case, an IPv6 address
in brackets, no final "/"). `host_header` is "origin", "client" or a host
name; `tls_verify` true or false; `connect_timeout` 1..60 and `read_timeout`
1..3600 whole seconds, per step. At save, an address literal and a name that
resolves are checked against the origin outbound rule (guard): a name that
does not resolve yet is accepted (its check says so), since every connect
resolves and vets it again.
"""

import ipaddress
from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core import netguard
from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, normalize_host

FIELDS = {"url", "host_header", "tls_verify", "connect_timeout", "read_timeout"}
DEFAULTS = {"host_header": "origin", "tls_verify": True, "connect_timeout": 5, "read_timeout": 30}
MAX_URL = 2000
TIMEOUTS = {"connect_timeout": (1, 60), "read_timeout": (1, 3600)}
_PATH_BAD = set(" \"<>\\^`{|}")


def url(body: dict) -> str:
    raw = v.text(body, "url", max_len=MAX_URL)
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as exc:
        raise FieldError(f"url is not a valid URL: {exc}", "url") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise FieldError("url must be an http:// or https:// URL with a host", "url")
    if parts.username is not None or parts.password is not None:
        raise FieldError("url must not hold credentials (user:password@)", "url")
    if parts.query or parts.fragment or "?" in raw or "#" in raw:
        raise FieldError("url must not have a query or fragment", "url")
    if port == 0:
        raise FieldError("url has port 0", "url")
    if not parts.path.isascii() or any(ord(c) < 33 or c in _PATH_BAD for c in parts.path):
        raise FieldError("url path must be ASCII without spaces or control characters (percent-encode them)",
                         "url")
    if any(seg in (".", "..") for seg in parts.path.split("/")):
        raise FieldError('url path must not have "." or ".." segments', "url")
    host = parts.hostname
    try:
        address = ipaddress.ip_address(host)
        host = f"[{address}]" if address.version == 6 else str(address)
    except ValueError:
        try:
            host = normalize_host(host)
        except HostnameError as exc:
            raise FieldError(f"url host: {exc}", "url") from None
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"


def host_header(body: dict) -> str:
    value = v.text(body, "host_header", max_len=253)
    if value in ("origin", "client"):
        return value
    try:
        return normalize_host(value)
    except HostnameError as exc:
        raise FieldError(f'host_header must be "origin", "client" or a host name: {exc}', "host_header") from None


def record_fields(body: dict, partial: bool) -> dict:
    """The http fields present in body; url required unless partial, the others defaulted."""
    out: dict = {}
    if "url" in body or not partial:
        out["url"] = url(body)
    if "host_header" in body:
        out["host_header"] = host_header(body)
    if "tls_verify" in body:
        out["tls_verify"] = v.boolean(body, "tls_verify", required=True)
    for name, (lo, hi) in TIMEOUTS.items():
        if name in body:
            out[name] = v.integer(body, name, lo, hi, required=True)
    return out if partial else {**DEFAULTS, **out}


def guard(record_url: str, policy: netguard.OutboundPolicy) -> None:
    """FieldError on "url" when the origin's address is one the node never connects to."""
    parts = urlsplit(record_url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    why = netguard.refusal(host, port, policy)
    if why is None and not _is_literal(host):
        try:
            netguard.vet_address(host, port, policy)
        except netguard.OutboundError as exc:
            if exc.step == "address":
                why = exc.message
    if why:
        raise FieldError(f"url: {why}", "url")


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False
