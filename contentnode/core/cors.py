"""A rule's `cors` member: which web origins may read its content from another site's scripts.

The public port adds the answer fields (public/edge_guard.py) and answers a
preflight OPTIONS itself; here are the member's shape, its stored form and
the origin decision, which know nothing of HTTP. The node never sends
Access-Control-Allow-Credentials: its content is public and a credentialed
request would let one site read another's answers made for a visitor.
"""

import re
from functools import lru_cache
from urllib.parse import urlsplit

from contentnode.core.fields import FieldError
from contentnode.core.hostnames import HostnameError, url_netloc
from contentnode.core.shapes import STRING, array, integer, nullable, obj

ANY = "*"
MAX_ORIGINS = 100
MAX_METHODS = 16
MAX_NAMES = 32
MAX_AGE = 86_400                      # a day; browsers cap it lower anyway (Chromium 2 h, Firefox 1 day)
DEFAULT_METHODS = ["GET", "HEAD"]
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_DEFAULT_PORTS = {"http": 80, "https": 443}

SHAPE = nullable(obj({
    "origins": array(STRING, MAX_ORIGINS, min_items=1),
    "methods": array(STRING, MAX_METHODS),
    "headers": array(STRING, MAX_NAMES),
    "max_age": nullable(integer(0, MAX_AGE)),
}, required=("origins",), description='origins allowed to read the content ("scheme://host[:port]", or "*" '
                                      "alone for any), the methods and request headers a preflight allows, "
                                      "and how long a browser may keep the preflight answer"))


def cors_rule(value):
    """The stored form of `cors`: null, or origins normalised, methods and header names checked."""
    if value is None:
        return None
    origins = value["origins"]
    if ANY in origins and len(origins) > 1:
        raise FieldError('cors.origins: "*" (any origin) stands alone', "cors.origins")
    stored = origins if origins == [ANY] else _unique([_origin(item) for item in origins])
    methods = _unique([_token(m, "cors.methods") for m in value.get("methods", DEFAULT_METHODS)])
    headers = _unique([_token(h, "cors.headers").lower() for h in value.get("headers", [])])
    return {"origins": stored, "methods": methods, "headers": headers, "max_age": value.get("max_age")}


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))


def _token(value: str, field: str) -> str:
    if not _TOKEN.fullmatch(value):
        raise FieldError(f"{field}: {value[:64]!r} is not an HTTP token", field)
    return value


def _origin(value: str) -> str:
    """An origin as browsers serialise it in the Origin header: scheme://host[:port], default port and a
    trailing slash left out."""
    field = "cors.origins"
    try:
        parts = urlsplit(value.strip())
        port = parts.port
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
            raise ValueError
        netloc = url_netloc(parts.hostname, None if port == _DEFAULT_PORTS[parts.scheme] else port)
    except (ValueError, HostnameError):
        raise FieldError(f'{field}: {value[:100]!r} is not an origin (http:// or https://, a host, '
                         'an optional port) nor "*"', field) from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.strip().endswith(("?", "#")):
        raise FieldError(f"{field}: {value[:100]!r} is an origin plus a path; an origin is "
                         "scheme://host[:port] only", field)
    return f"{parts.scheme}://{netloc}"


@lru_cache(maxsize=256)
def _allowed(origins: tuple) -> frozenset:
    return frozenset(origins)


def allow_origin(cors: dict, origin: str | None) -> str | None:
    """The Access-Control-Allow-Origin value for a request from `origin` (its Origin header), or None."""
    origins = cors["origins"]
    if origins == [ANY]:
        return ANY
    return origin if origin is not None and origin in _allowed(tuple(origins)) else None


def varies(cors: dict) -> bool:
    """Whether answers differ by the request's Origin (a list of origins, not "*")."""
    return cors["origins"] != [ANY]
