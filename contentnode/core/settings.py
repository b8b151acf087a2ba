"""Node settings: the keys, their defaults and their validation.

The state document keeps only the values an operator changed (section
"settings"); everyone else reads `effective(doc)` so a default changed in a
later version reaches nodes that never touched that key.
"""

import ipaddress
import re
import urllib.parse

from contentnode.core.fields import FieldError
from contentnode.core.text import one_line

LETS_ENCRYPT_DIRECTORY = "https://acme-v02.api.letsencrypt.org/directory"
LOG_LEVELS = ("debug", "info", "warning", "error")
UPDATE_CHANNELS = ("stable", "beta")
CLIENT_ADDRESSES = ("full", "truncated", "off")   # how traffic insight keeps client addresses

# Keys changed through PUT /api/settings.
GENERAL_DEFAULTS: dict[str, object] = {
    "node_name": "contentnode",
    "public_url": None,            # base URL of the public side, for links shown in the panel
    "public_scheme": "http",       # scheme the domain check uses to reach this node
    "public_port": None,           # port the domain check uses; None = the public listener's port
    "acme_directory": LETS_ENCRYPT_DIRECTORY,
    "acme_email": None,
    "cache_max_bytes": 1 << 30,
    "allow_private_outbound": True,
    "trusted_proxies": [],
    "link_grace_seconds": 86400,
    "log_level": "info",
    "client_addresses": "truncated",   # in the traffic top and tail: IPv4 by /24, IPv6 by /48
}

# The settings a fleet's primary decides for every node (docs/API.md, Fleet); the rest are
# each node's own (its name, its listeners' view, cache size, proxies, log level...).
FLEET_SHARED = frozenset({"acme_directory", "acme_email", "link_grace_seconds"})

# Keys with their own endpoints (PUT /api/admin-host, /api/admin-allow, /api/updates).
DEFAULTS = dict(
    GENERAL_DEFAULTS,
    admin_host=None,
    admin_allow=[],
    updates={"channel": "stable", "auto_check": False, "url": None},
)

MAX_CIDRS = 100
MAX_CACHE_BYTES = 1 << 50
MAX_GRACE = 30 * 86400  # link_grace_seconds
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,253}$")


def effective(doc):
    """All settings: defaults overlaid with what the document holds."""
    stored = doc.get("settings", {}) or {}
    out = {}
    for key, default in DEFAULTS.items():
        value = stored.get(key, default)
        if isinstance(default, dict):
            value = dict(default, **(value or {}))
        elif isinstance(default, list):
            value = list(value)
        out[key] = value
    return out


def validate(partial):
    """Check a partial update of the general settings; return it normalised."""
    if not isinstance(partial, dict):
        raise FieldError("settings must be a JSON object")
    out = {}
    for key, value in partial.items():
        check = _CHECKS.get(key)
        if check is None:
            raise FieldError(f"{key} is changed with PUT /api/{key.replace('_', '-')}" if key in DEFAULTS
                             else f"unknown setting {key!r}", key)
        out[key] = check(key, value)
    return out


def _text(field, value, max_len):
    if not isinstance(value, str) or not value.strip():
        raise FieldError(f"{field} must be a non-empty string", field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise FieldError(f"{field} holds an unpaired surrogate (not valid Unicode text)", field) from None
    if not one_line(value):  # before trimming, which would drop a separator silently
        raise FieldError(f"{field} must be one line without control characters", field)
    value = value.strip()
    if len(value) > max_len:
        raise FieldError(f"{field} must be at most {max_len} printable characters", field)
    return value


def _int(field, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{field} must be an integer", field)
    if not low <= value <= high:
        raise FieldError(f"{field} must be between {low} and {high}", field)
    return value


def _choice(field, value, choices):
    if not any(type(value) is type(choice) and value == choice for choice in choices):
        raise FieldError(f"{field} must be one of {', '.join(choices)}", field)
    return value


def _bool(field, value):
    if not isinstance(value, bool):
        raise FieldError(f"{field} must be true or false", field)
    return value


def http_url(field, value, allow_path=True):
    """An absolute http(s) URL with a host and no credentials or fragment, in ASCII form.

    The host becomes IDNA (punycode) and the path and query percent-encoded, so
    the URL can be sent in a header (a redirect's Location) and an HTTP request line.
    """
    value = _text(field, value, 2048)
    try:
        parts = urllib.parse.urlsplit(value)
        port = parts.port  # raises ValueError on a bad port
    except ValueError:
        raise FieldError(f"{field} is not a valid URL", field) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FieldError(f"{field} must be an http or https URL with a host", field)
    if parts.username or parts.password or parts.fragment:
        raise FieldError(f"{field} must not hold credentials or a fragment", field)
    if not allow_path and (parts.path not in ("", "/") or parts.query):
        raise FieldError(f"{field} must not have a path or query", field)
    host = _ascii_host(field, parts.hostname)
    netloc = host if port is None else f"{host}:{port}"
    path = urllib.parse.quote(parts.path, safe=_URL_SAFE)
    query = urllib.parse.quote(parts.query, safe=_URL_SAFE + "?")
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, ""))


_URL_SAFE = "/%:@!$&'()*+,;=-._~"


def _ascii_host(field, host: str) -> str:
    """An IP literal as is (IPv6 in brackets); a name in IDNA form, or FieldError."""
    try:
        address = ipaddress.ip_address(host)
        return f"[{address}]" if address.version == 6 else str(address)
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise FieldError(f"{field} has a host that is not a valid internationalised name", field) from None
    if not re.fullmatch(r"[a-z0-9.\-_]+", ascii_host):
        raise FieldError(f"{field} has a host with characters a host name cannot hold", field)
    return ascii_host


def hostname(field, value, fqdn=True):
    """A DNS host name (lower-cased); the admin host must be fully qualified."""
    value = _text(field, value, 253).lower().rstrip(".")
    labels = value.split(".")
    if (fqdn and len(labels) < 2) or not all(_HOST_LABEL.match(label) for label in labels):
        raise FieldError(f"{field} must be a {'fully qualified ' if fqdn else ''}host name", field)
    return value


def cidr_list(field, value):
    """IPv4/IPv6 networks or single addresses, normalised to network form."""
    if not isinstance(value, list):
        raise FieldError(f"{field} must be a list of CIDRs", field)
    if len(value) > MAX_CIDRS:
        raise FieldError(f"{field} holds at most {MAX_CIDRS} entries", field)
    out = []
    for item in value:
        if not isinstance(item, str) or not one_line(item):
            raise FieldError(f"{field} entries must be one-line strings", field)
        try:
            net = ipaddress.ip_network(item.strip(), strict=False)
        except ValueError:
            raise FieldError(f"{item!r} is not an IPv4 or IPv6 CIDR", field) from None
        if str(net) not in out:
            out.append(str(net))
    return out


def address_in(ip, cidrs):
    """True when the address string lies in one of the CIDRs."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if addr.version == 6 and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    return any(addr in ipaddress.ip_network(c) for c in cidrs)


def _optional(check):
    def wrapped(field, value):
        return None if value is None else check(field, value)
    return wrapped


def _email(field, value):
    value = _text(field, value, 254)
    if not _EMAIL.match(value):
        raise FieldError(f"{field} must be an email address", field)
    return value


_CHECKS = {
    "node_name": lambda f, v: _text(f, v, 64),
    "public_url": _optional(lambda f, v: http_url(f, v, allow_path=False)),
    "public_scheme": lambda f, v: _choice(f, v, ("http", "https")),
    "public_port": _optional(lambda f, v: _int(f, v, 1, 65535)),
    "acme_directory": http_url,
    "acme_email": _optional(_email),
    "cache_max_bytes": lambda f, v: _int(f, v, 0, MAX_CACHE_BYTES),
    "allow_private_outbound": _bool,
    "trusted_proxies": cidr_list,
    "link_grace_seconds": lambda f, v: _int(f, v, 0, MAX_GRACE),
    "log_level": lambda f, v: _choice(f, v, LOG_LEVELS),
    "client_addresses": lambda f, v: _choice(f, v, CLIENT_ADDRESSES),
}


def validate_updates(partial):
    """Check a partial update of the update-check settings."""
    if not isinstance(partial, dict):
        raise FieldError("body must be a JSON object")
    out = {}
    for key, value in partial.items():
        if key == "channel":
            out[key] = _choice(key, value, UPDATE_CHANNELS)
        elif key == "auto_check":
            out[key] = _bool(key, value)
        elif key == "url":
            out[key] = None if value is None else http_url(key, value)
        else:
            raise FieldError(f"unknown field {key!r}", key)
    return out
