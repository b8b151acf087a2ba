"""The rules of an http bucket's fields (core/buckets.py KINDS["http"] declares them), and the outbound guard at save.

`url` is http(s)://host[:port][/base/path]: no query, fragment or
credentials; stored normalised (scheme and host lower-case, an IPv6 address
in brackets, no final "/"). `host_header` is "origin", "client" or a host
name; `tls_verify` true or false; `connect_timeout` 1..60 and `read_timeout`
1..3600 whole seconds, per step. At save, an address literal and a name that
resolves are checked against the origin outbound rule (guard): a name that
does not resolve yet is accepted (its check says so), since every connect
resolves and vets it again.
"""

from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core import netguard
from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, normalize_host, url_netloc

MAX_URL = 2000
TIMEOUTS = {"connect_timeout": (1, 60, 5), "read_timeout": (1, 3600, 30)}   # seconds: lowest, highest, default
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
    try:
        netloc = url_netloc(parts.hostname, port)
    except HostnameError as exc:
        raise FieldError(f"url host: {exc}", "url") from None
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"


def host_header(body: dict) -> str:
    value = v.text(body, "host_header", max_len=253)
    if value in ("origin", "client"):
        return value
    try:
        return normalize_host(value)
    except HostnameError as exc:
        raise FieldError(f'host_header must be "origin", "client" or a host name: {exc}', "host_header") from None


def guard(record_url: str, policy: netguard.OutboundPolicy) -> None:
    """FieldError on "url" when the origin's address is one the node never connects to."""
    parts = urlsplit(record_url)
    try:
        netguard.vet_address(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80), policy)
    except netguard.OutboundError as exc:
        if exc.step == "address":   # (a name that does not resolve yet passes: see the module docstring)
            raise FieldError(f"url: {exc.message}", "url") from None
