"""What the primary tells the operator about the other nodes, and its /metrics gauges.

Each node's status (fleet/status.py) is turned into incidents; the primary
notifies once when an incident starts and again only after it ended and came
back, with one `fleet_node_problem` for all the incidents a status round
found starting (a hundred nodes going unseen at once is one message, naming
them by id, in words of this node's own: no text a status carries):

- unseen: no status for three polls; error: the node reports a last_error;
- behind: the node did not apply the latest bundle for three polls after
  the primary published it;
- cert_expiring: the node serves a certificate that expires within 14 days
  and is not the one the primary holds for that name (a stuck node; the
  primary's own certificates are its own `cert_expiring` events, so a
  certificate the whole fleet shares is one notification, not one a node).

Replicas report the certificates they serve that expire within that window
(at most CERTIFICATES_REPORTED, soonest first), so a status stays small.
"""

import re

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core.renewal import DAY, WARN_DAYS
from contentnode.fleet import status

CERT_WARN_SECONDS = max(WARN_DAYS) * DAY
CERTIFICATES_REPORTED = 100
_CODE = re.compile(r"[a-z_]{1,40}")


def _not_after(record) -> float | None:
    try:
        return parse_rfc3339(record["certificate"]["not_after"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def certificates_due(domains, now: float) -> dict:
    """{host: not_after} of this node's certificates expiring within the warning window."""
    due = sorted((when, host) for host, record in domains.items()
                 if (when := _not_after(record)) is not None and when - now <= CERT_WARN_SECONDS)
    return {host: rfc3339(when) for when, host in due[:CERTIFICATES_REPORTED]}


def _seconds(stamp) -> float | None:
    try:
        return parse_rfc3339(stamp)
    except (TypeError, ValueError, AttributeError):
        return None


def annotate(rows: list, domains, published_at, poll_seconds: int, now: float) -> None:
    """Add "behind" and "expiring_certificates" to the primary's rows of the other nodes."""
    published = _seconds(published_at)
    for row in rows:
        own_poll = row.get("poll_seconds") if type(row.get("poll_seconds")) is int else poll_seconds
        late = published is not None and now - published > status.UNSEEN_POLLS * max(own_poll, poll_seconds)
        lag = row.get("lag")
        row["behind"] = bool(late and not row.get("unseen") and type(lag) is int and lag > 0)
        reported = row.get("certificates") if isinstance(row.get("certificates"), dict) else {}
        row["expiring_certificates"] = sorted(
            host for host, when in reported.items()
            if isinstance(host, str) and (stamp := _seconds(when)) is not None and stamp - now <= CERT_WARN_SECONDS
            and _not_after(domains.get(host)) != stamp)


def problems(row: dict) -> set:
    found = status.problems(row)
    if row.get("behind"):
        found.add("behind")
    if row.get("expiring_certificates"):
        found.add("cert_expiring")
    return found


def detail(row: dict, problem: str) -> str:
    """One incident in words of this node's own making: numbers, node ids, error codes and host
    names of the status's checked shape, never a text a status carries (its messages, its name)."""
    if problem == "error":
        code = (row.get("last_error") or {}).get("code")
        if row.get("unreadable"):
            return "its status cannot be read from the bucket"
        return f"it reports {code}" if isinstance(code, str) and _CODE.fullmatch(code) else "it reports an error"
    if problem == "unseen":
        return f"no status for {status.UNSEEN_POLLS} polls (last {row.get('seen_at')})"
    if problem == "behind":
        return f"still at seq {row.get('seq')}, {row.get('lag')} behind the primary, for {status.UNSEEN_POLLS} polls"
    certificates = row.get("certificates") or {}
    return "serves certificates expiring soon that the primary has replaced: " + ", ".join(
        f"{host} (until {certificates.get(host)})" for host in row.get("expiring_certificates", []))


def summary(rows: list, started: list) -> dict:
    """The fields of the one fleet_node_problem notification for the (node_id, problem) pairs
    that started this round: how many nodes, their ids, one line each (see GET /api/fleet)."""
    by_id = {row["node_id"]: row for row in rows}
    lines = [f"{node_id}: {problem}: {detail(by_id[node_id], problem)}" for node_id, problem in started]
    nodes = sorted({node_id for node_id, _ in started})
    return {"count": len(nodes), "node_ids": ", ".join(nodes), "problems": "; ".join(sorted({p for _, p in started})),
            "summary": "\n".join(lines)}


def gauges(fleet, now: float) -> dict:
    """The primary's fleet gauges, or {} on any other node."""
    state = fleet.state()
    if state.get("role") != "primary":
        return {}
    seen = [row for row in fleet.nodes if not row.get("unseen")]
    lags = [row["lag"] for row in seen if type(row.get("lag")) is int]
    published = _seconds(state.get("issued_at"))
    return {"nodes_seen": len(seen), "max_lag": max(lags, default=0),
            "bundle_age_seconds": max(0.0, now - published) if published is not None else None}


_GAUGES = [
    ("nodes_seen", "contentnode_fleet_nodes_seen", "Other fleet nodes whose status is fresh (primary only)"),
    ("max_lag", "contentnode_fleet_max_lag", "Most bundle seqs a fresh node is behind the primary (primary only)"),
    ("bundle_age_seconds", "contentnode_fleet_bundle_age_seconds",
     "Seconds since the primary published its current bundle (primary only)"),
]


def register_metrics(metrics, fleet, clock) -> None:
    """The three gauges; on a node that is not the primary they carry no sample."""
    for member, name, help_text in _GAUGES:
        def sample(member=member):
            value = gauges(fleet, clock.now()).get(member)
            return [] if value is None else [((), value)]
        metrics.registry.gauge(name, help_text, sample)
