"""Routing rules: which bucket key answers a request for (host, path).

A rule says: requests on `domain` under `path` come from `bucket`, key
`prefix + rest`. Rule paths are directories: "/static" and "/static/" are the
same rule, it matches "/static" and everything below "/static/" (never
"/staticfoo"), and `rest` is what follows "/static/" (so "/static/a/b.png"
with prefix "site/" is key "site/a/b.png"). The longest matching path wins.

Lookups happen on every content request, so the index is a dict per host from
normalised rule path to rule: a lookup tries the request path and each of its
ancestors, one dict probe per path segment. The cost depends on the depth of
the request path, not on how many rules exist.
"""

from dataclasses import dataclass

from contentnode.core import cache_policy as cp
from contentnode.core import cors, edge_rules
from contentnode.core import fields as v
from contentnode.core import images, referers
from contentnode.core.fields import FieldError
from contentnode.core.records import Field, Record
from contentnode.core.shapes import BOOLEAN, integer, one_of, text
from contentnode.core.text import encodable

MAX_PATH = 1024
MAX_PREFIX = 1024
MAX_CACHE_TTL = 31_536_000  # one year
_FORBIDDEN_IN_PATH = set("?#%\\") | {chr(c) for c in range(33)} | {"\x7f"}


def normalise_path(value: str) -> str:
    """The canonical form of a rule path, or FieldError naming "path".

    Starts with "/", repeated slashes collapse, a trailing slash is dropped
    (except for "/" itself); "." and ".." segments, whitespace, control
    characters and ?, #, %, \\ are refused (rule paths are decoded paths).
    """
    if not isinstance(value, str):
        raise FieldError("path must be a string", "path")
    if not value.startswith("/"):
        raise FieldError('path must start with "/"', "path")
    if not encodable(value):
        raise FieldError("path holds an unpaired surrogate (not valid Unicode text)", "path")
    if len(value) > MAX_PATH:
        raise FieldError(f"path is longer than {MAX_PATH} characters", "path")
    bad = sorted(set(value) & _FORBIDDEN_IN_PATH)
    if bad:
        raise FieldError(f"path must not contain {', '.join(repr(c) for c in bad)}", "path")
    segments = [s for s in value.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise FieldError('path must not contain "." or ".." segments', "path")
    return "/" + "/".join(segments)


def validate_prefix(value: str) -> str:
    """A bucket key prefix: "" or text without a leading "/" or control characters."""
    if not isinstance(value, str):
        raise FieldError("prefix must be a string", "prefix")
    if value.startswith("/"):
        raise FieldError('prefix must not start with "/" (bucket keys have no leading slash)', "prefix")
    if not encodable(value):
        raise FieldError("prefix holds an unpaired surrogate (not valid Unicode text)", "prefix")
    if len(value.encode("utf-8")) > MAX_PREFIX:
        raise FieldError(f"prefix is longer than {MAX_PREFIX} bytes", "prefix")
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise FieldError("prefix must not contain control characters", "prefix")
    if any(s in (".", "..") for s in value.split("/")[:-1]):
        raise FieldError('prefix must not contain "." or ".." segments', "prefix")
    return value


RULE = Record("rule", {
    "domain": Field(text(253), rule=lambda value: v.host({"domain": value}, "domain")),
    "path": Field(text(MAX_PATH), rule=normalise_path),
    "bucket": Field(text(64), rule=lambda value: v.text({"bucket": value}, "bucket", max_len=64)),
    "prefix": Field(text(MAX_PREFIX, min_length=0), "", rule=validate_prefix),
    "cache_ttl": Field(integer(0, MAX_CACHE_TTL), 3600),
    "signed": Field(BOOLEAN, False),
    "images": Field(BOOLEAN, False),
    "compress": Field(BOOLEAN, True),
    "enabled": Field(BOOLEAN, True),
    # the cache members (core/cache_policy.py); their defaults here are an S3 or folder rule's, a
    # rule created on an http bucket gets cache_policy.HTTP_DEFAULTS (create_defaults)
    "cache_mode": Field(one_of(*cp.CACHE_MODES), "override", since=3),
    "query": Field({"type": ["string", "object"], "description": '"ignore", "include" or {"only": [names]}'},
                   "ignore", rule=cp.query_policy, since=3),
    "methods": Field(one_of(*cp.METHOD_POLICIES), "read", since=3),
    "max_body": Field(integer(0, cp.MAX_MAX_BODY), cp.DEFAULT_MAX_BODY, since=3),
    "stale_while_revalidate": Field(integer(0, cp.MAX_STALE), 0, since=3),
    "stale_if_error": Field(integer(0, cp.MAX_STALE), 0, since=3),
    # the edge members (core/edge_rules.py), checked before any cache or origin work
    "access": Field(edge_rules.ACCESS_SHAPE, None, rule=edge_rules.access_rule, since=4),
    "rate_limit": Field(edge_rules.RATE_LIMIT_SHAPE, None, since=4),
    "headers": Field(edge_rules.HEADERS_SHAPE, None, rule=edge_rules.headers_rule, since=4),
    "cors": Field(cors.SHAPE, None, rule=cors.cors_rule, since=5),
    "referers": Field(referers.SHAPE, None, rule=referers.referers_rule, since=5),
}, unique=lambda rule: (rule["domain"], rule["path"]), shared=True)


def create_defaults(doc: dict, bucket_id: str | None) -> dict:
    """The defaults of a new rule on that bucket: the table's, and a shared cache's on an http bucket."""
    bucket = doc.get("buckets", {}).get(bucket_id)
    return {**RULE.defaults(), **(cp.defaults_for(bucket["type"]) if bucket else {})}


def record_fields(body: dict, doc: dict, partial: bool, countries=None) -> dict:
    """The validated rule fields present in body (domain, path, bucket required unless partial).

    The domain and the bucket must exist in `doc`, the state being changed; a country list needs
    `countries`, the node's country database (core/geoip.py), to be there.
    """
    out = RULE.read(body, partial)
    if "domain" in out and out["domain"] not in doc.get("domains", {}):
        raise FieldError(f"domain {out['domain']} is not configured; add it first", "domain")
    if "bucket" in out and out["bucket"] not in doc.get("buckets", {}):
        raise FieldError(f"no bucket with id {out['bucket']!r}", "bucket")
    if out.get("images") and not images.available():
        raise FieldError(f"images on the fly need Pillow: install the {images.EXTRA} extra", "images")
    edge_rules.countries_readable(out.get("access"), countries)
    return out


def has_dot_segment(path: str) -> bool:
    """True when a request path holds a "." or ".." segment (never mapped to a key)."""
    probe = path + "/"
    return "/./" in probe or "/../" in probe


def key_for(rule_path: str, prefix: str, request_path: str) -> str:
    """The bucket key for `request_path`, which `rule_path` matches."""
    rest = request_path[len(rule_path):]
    if rest.startswith("/"):
        rest = rest[1:]
    return prefix + rest


@dataclass(frozen=True)
class Match:
    rule: dict  # the rule record (check rule["enabled"]: a disabled rule still claims its path)
    key: str
    edge: edge_rules.EdgeRule   # its edge members as the public port checks them, made with the index


class RuleIndex:
    """An immutable lookup structure over a set of rule records.

    Each record needs "domain" (normalised host), "path" (normalise_path form)
    and "prefix". Build a new index when rules change; lookups never lock.
    """

    def __init__(self, rules) -> None:
        hosts: dict[str, dict[str, tuple]] = {}
        for rule in rules:
            hosts.setdefault(rule["domain"], {})[rule["path"]] = (rule, edge_rules.EdgeRule(rule))
        self._hosts = hosts
        self.size = sum(len(paths) for paths in hosts.values())

    def match(self, host: str, path: str) -> Match | None:
        """The longest rule on `host` (normalised, no port) covering the decoded `path`.

        None when no rule covers it, or when the path is not absolute or holds
        a "." or ".." segment (such paths must never be turned into keys).
        """
        table = self._hosts.get(host)
        if table is None or not path.startswith("/") or has_dot_segment(path):
            return None
        candidate = path.rstrip("/") or "/"
        while True:
            found = table.get(candidate)
            if found is not None:
                rule, edge = found
                return Match(rule, key_for(rule["path"], rule["prefix"], path), edge)
            if candidate == "/":
                return None
            candidate = candidate[:candidate.rfind("/")] or "/"


def rules_using(doc: dict, field: str, value: str) -> list:
    """The ids of the rules whose `field` ("domain" or "bucket") is value: what blocks deleting it."""
    return sorted(rule_id for rule_id, rule in (doc.get("rules") or {}).items()
                  if isinstance(rule, dict) and rule.get(field) == value)


def rule_refs(rule_ids) -> list:
    """Rule ids as the `refs` of a 409 body: [{"type": "rule", "id": ...}]."""
    return [{"type": "rule", "id": rule_id} for rule_id in rule_ids]
