"""What a fleet shares and what stays each node's own (docs/API.md, Fleet).

Shared, in the bundle: domains (with redirects), their certificates and keys
(sealed, fleet/certfiles.py), buckets (sealed: they hold credentials), rules, the signed-link key ring (sealed), the settings in
core.settings.FLEET_SHARED and the purge history. Everything else of the
state document is node-local: node identity, users, sessions, API tokens,
policy, notifications, https listener, update status, the other settings.
"""

from contentnode.core.migrations import fill_defaults
from contentnode.core.settings import FLEET_SHARED
from contentnode.core.signing import empty_ring

SECTIONS = ("domains", "buckets", "rules", "links")   # replaced whole by a bundle
CERTIFICATES = "certificates"                         # the certificate files (fleet/certfiles.py)
PARTS = frozenset({*SECTIONS, "settings", "purges", CERTIFICATES})
SEALED = frozenset({"buckets", "links", CERTIFICATES})
PURGES = "fleet_purges"                               # the primary's purge history section
PURGE_HISTORY_MAX = 1000
# A commit touching one of these may change what the primary publishes.
WATCHED = frozenset({*SECTIONS, "settings", PURGES})


def parts_of(doc: dict, certificates: dict | None = None) -> dict:
    """The bundle parts of a state document (the primary's) and its certificate files
    (fleet/certfiles.py read; none when not given)."""
    settings = doc.get("settings") or {}
    return {"domains": doc["domains"], "buckets": doc["buckets"], "rules": doc["rules"], CERTIFICATES: certificates or {},
            "links": doc.get("links") or empty_ring(),
            "settings": {k: settings[k] for k in sorted(FLEET_SHARED) if k in settings},
            "purges": list((doc.get(PURGES) or {}).get("items", []))}


def applied(doc: dict, parts: dict) -> dict:
    """{section: new value} that a replica swaps in for `parts`: the shared sections whole,
    and its settings with the shared keys taken from the bundle, its own keys kept."""
    settings = {k: v for k, v in (doc.get("settings") or {}).items() if k not in FLEET_SHARED}
    shared = parts["settings"] if isinstance(parts["settings"], dict) else {}
    settings.update({k: v for k, v in shared.items() if k in FLEET_SHARED})
    out = {name: parts[name] for name in SECTIONS}
    fill_defaults(out)   # a primary running an older version sends records without the newer fields
    out["settings"] = settings
    return out


def counts(doc: dict) -> dict:
    """How many shared objects a document holds (what a join says it will replace)."""
    return {"domains": len(doc.get("domains") or {}), "buckets": len(doc.get("buckets") or {}),
            "rules": len(doc.get("rules") or {}),
            "link_keys": len(((doc.get("links") or {}).get("keys")) or {}),
            "certificates": sum(1 for r in (doc.get("domains") or {}).values() if r.get("certificate")),
            "shared_settings": sorted(k for k in FLEET_SHARED if k in (doc.get("settings") or {}))}


def record_purges(history: dict | None, at: str, entries: list) -> dict:
    """The purge history with these (kind, host, value) entries added (ids count up; only the
    newest PURGE_HISTORY_MAX are kept)."""
    history = dict(history or {})
    next_id = int(history.get("next", 1))
    items = list(history.get("items", []))
    for kind, host, value in entries:
        items.append({"id": next_id, "at": at, "kind": kind, "host": host, "value": value})
        next_id += 1
    return {"next": next_id, "items": items[-PURGE_HISTORY_MAX:]}


def purges_to_run(items, last_id: int | None) -> tuple[list, bool, int]:
    """(entries newer than last_id, whether to purge everything instead, the newest id).

    Everything when this node never applied a bundle (last_id None: its cache holds
    what its old configuration served) or when entries it never saw fell off the history.
    """
    items = [i for i in items if isinstance(i, dict) and type(i.get("id")) is int]
    seen = last_id or 0
    newer = [i for i in items if i["id"] > seen]
    missed = last_id is None or (bool(newer) and min(i["id"] for i in newer) > seen + 1)
    return newer, missed, max([seen] + [i["id"] for i in items])
