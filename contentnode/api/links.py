"""Signed links: hand out time-limited URLs and rotate the signing key.

The key ring is the "links" section of the state document (see core/signing);
its secrets never appear in an answer, a log line or the audit log. The ring
gets its first key when the first link is made.
"""

import ipaddress
from urllib.parse import unquote, urlsplit

from contentnode.core import fields as v
from contentnode.clock import rfc3339
from contentnode.core import rules, signing
from contentnode.core.settings import effective
from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.http.errors import invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, integer, listing, nullable, obj, text


def _covering_rule(doc: dict, url: str) -> tuple[str, str, dict]:
    """(host, decoded path, rule) of a URL that this node serves, or 400 naming `url`."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a malformed or out-of-range port
    except ValueError as exc:
        raise invalid(f"url is not a valid URL: {exc}", "url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise invalid("url must be an http:// or https:// URL with a host", "url")
    if parts.username or parts.password or parts.fragment:
        raise invalid("url must not carry credentials or a fragment", "url")
    try:
        host = normalize_host(parts.hostname)
        path = unquote(parts.path or "/", errors="strict")
    except HostnameError as exc:
        raise invalid(f"url host: {exc}", "url") from None
    except UnicodeDecodeError:
        raise invalid("url path is not valid UTF-8 once decoded", "url") from None
    if host not in doc.get("domains", {}):
        raise invalid(f"{host} is not a domain of this node", "url")
    match = rules.RuleIndex(r for r in doc["rules"].values() if r["domain"] == host).match(host, path)
    if match is None:
        raise invalid(f"no rule covers {path} on {host}", "url")
    return host, path, match.rule


def create_link(req):
    body = req.body
    url = v.text(body, "url", max_len=4000)
    expires_in = v.integer(body, "expires_in", signing.MIN_EXPIRES_IN, signing.MAX_EXPIRES_IN, required=True)
    ip = v.text(body, "ip", required=False, max_len=64)
    if ip is not None:
        try:
            ip = str(ipaddress.ip_address(ip))
        except ValueError:
            raise invalid("ip must be an IPv4 or IPv6 address", "ip") from None
    host, path, rule = _covering_rule(req.app.store.data, url)
    stamp = req.app.clock.now()
    ring = req.app.store.data["links"]
    if ring.get("current") not in ring.get("keys", {}):
        with req.app.store.transaction() as doc:
            doc["links"] = signing.ensure_key(doc["links"], stamp)
            ring = doc["links"]
        req.audit("links.key_create", target=ring["current"])
    expires_at = int(stamp) + expires_in
    signed = signing.signed_url(ring, url, expires_at, ip)
    req.audit("link.create", target=f"{host}{path}",
              detail={"expires_at": rfc3339(expires_at), "kid": ring["current"], "ip": ip})
    return {"url": signed, "expires_at": rfc3339(expires_at), "kid": ring["current"],
            "rule": rule["id"], "rule_signed": rule["signed"]}


def rotate_key(req):
    body = req.body or {}
    grace = v.integer(body, "grace_seconds", 0, signing.MAX_GRACE,
                      default=effective(req.app.store.data)["link_grace_seconds"])
    stamp = req.app.clock.now()
    with req.app.store.transaction() as doc:
        doc["links"], kid, previous = signing.rotate(doc["links"], stamp, grace)
        ring = doc["links"]
    retires = ring["keys"][previous]["retires_at"] if previous in ring["keys"] else None
    req.audit("links.rotate", target=kid, detail={"previous": previous, "grace_seconds": grace})
    return {"kid": kid, "previous_kid": previous,
            "previous_valid_until": rfc3339(retires), "keys": _keys(ring, stamp)}


def _keys(ring: dict, stamp: float) -> list:
    view = signing.public_view(ring, stamp)
    return [{"kid": k["kid"], "current": k["kid"] == view["current_kid"], "created_at": rfc3339(k["created_at"]),
             "retires_at": rfc3339(k["retires_at"])} for k in view["keys"]]


def list_keys(req):
    return {"keys": _keys(req.app.store.data["links"], req.app.clock.now())}


def _panel_links(req):
    """Signing key ids and their rotation times, never the keys."""
    return {"keys": _keys(req.app.store.data["links"], req.app.clock.now())}


PANEL_SECTIONS = [("links", "settings:write", _panel_links)]

LINK_BODY = obj({"url": text(4000), "expires_in": integer(signing.MIN_EXPIRES_IN, signing.MAX_EXPIRES_IN),
                 "ip": nullable(text(64))}, required=["url", "expires_in"])
ROTATE_BODY = obj({"grace_seconds": integer(0, signing.MAX_GRACE)})

KEYS = listing("keys", answer({"kid": STRING, "current": BOOLEAN, "created_at": STRING,
                               "retires_at": nullable(STRING)}))

ROUTES = [
    Route("POST", "/api/links", "routes:write", create_link, body=LINK_BODY),
    Route("POST", "/api/links/rotate", "settings:write", rotate_key, body=ROTATE_BODY, body_optional=True,
          fleet_shared=True),
    Route("GET", "/api/links/keys", "settings:write", list_keys, answer=KEYS),
]
