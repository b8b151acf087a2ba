"""Node statuses in the bucket: nodes/<node_id>.json, written by every node each
poll and read by the primary, which turns them into lag, version skew and
"not seen" (three polls without a status).

A status is plain JSON (nothing secret in it) signed by its node's own
member key (fleet/members.py Authority; in a fleet without member lists yet,
a MAC under a key derived from the fleet key), so only a listed member
writes one the primary accepts. It is capped in size when read, its
signature checked, then each member against the shape this version writes; one failing any of that is not listed, only counted
("unknown_statuses": a bucket writer cannot put text or load on the
primary through it), and one missing status never hides the others.
"""

import re

from contentnode.clock import parse_rfc3339
from contentnode.core.s3 import S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.fleet.members import PENDING, public_of
from contentnode.fleet.wire import loads

NODES = "nodes/"
STATUS_MAX_BYTES = 32 << 10   # a real status is a few kilobytes (100 certificates: about 8)
MAX_NODES = 1000          # statuses the primary reads at most (one LIST page)
UNSEEN_POLLS = 3
_NODE_ID = re.compile(r"^[0-9a-f]{16}$")
FIELDS = ("node_id", "name", "role", "version", "seq", "applied_at", "last_error", "seen_at",
          "poll_seconds", "health", "traffic", "certificates", "folder_roots", "address", "member_keys", "left")


def key(prefix: str, node_id: str) -> str:
    return f"{prefix}{NODES}{node_id}.json"


def write(client: S3Client, prefix: str, status: dict, authority) -> None:
    client.put_object(key(prefix, status["node_id"]), authority.write(status), "application/json")


def _text(limit: int, pattern: str = r"[ -~]*"):
    rule = re.compile(pattern)
    return lambda v: v is None or (isinstance(v, str) and len(v) <= limit and rule.fullmatch(v) is not None)


def _number(v) -> bool:
    return v is None or (type(v) is int and 0 <= v < 1 << 62)


def _mapping(limit: int, key, value):
    return lambda v: v is None or (isinstance(v, dict) and len(v) <= limit
                                   and all(key(k) and value(x) for k, x in v.items()))


_PRINTABLE = r"[^\x00-\x1f\x7f]*"
_STAMP = _text(40, r"[0-9TZ:.+-]*")
# the shape of every member of a status as this version writes it: anything else is refused whole
# (a status may hold no more than a few kilobytes the primary keeps and shows)
_SHAPE = {
    "node_id": _text(16), "name": _text(64, _PRINTABLE), "role": _text(16, r"[a-z]*"),
    "version": _text(40), "seq": _number, "applied_at": _STAMP, "seen_at": _STAMP, "poll_seconds": _number,
    "last_error": _mapping(3, _text(16, r"code|message|at"), lambda v: _text(2000, _PRINTABLE)(v)),
    "health": _mapping(2, _text(16, r"ready|bundle_seen_at"), lambda v: v in (True, False) or _STAMP(v)),
    "traffic": _mapping(32, _text(64), _number),
    "certificates": _mapping(100, _text(253, r"[A-Za-z0-9.*-]+"), _STAMP),
    "folder_roots": lambda v: v is None or (isinstance(v, list) and len(v) <= 16
                                            and all(v_ is not None and _text(1024, _PRINTABLE)(v_) for v_ in v)),
    "address": _text(300, _PRINTABLE),
    "member_keys": lambda v: v is None or public_of(v) is not None,   # an upgraded fleet adopts them
    "left": lambda v: v in (None, True),                              # written once by `leave`
}


def _clean(raw: bytes, node_id: str, authority) -> dict | None:
    """The status's members, or None: not JSON (NaN, nested too deeply), another node's, not
    signed by that member, or not of this version's shape."""
    try:
        doc = loads(raw)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("node_id") != node_id or not authority.valid(doc, node_id):
        return None
    if not all(check(doc.get(name)) for name, check in _SHAPE.items()):
        return None
    return {name: doc.get(name) for name in FIELDS}


def read_one(client: S3Client, prefix: str, node_id: str, authority) -> dict | None:
    """One node's status (a replica reads its primary's, to name it by name and address); None when
    it is missing or not valid. S3Error when the bucket fails."""
    fetched = client.get_bytes(key(prefix, node_id), max_bytes=STATUS_MAX_BYTES)
    return _clean(fetched.body, node_id, authority) if fetched is not None and fetched.body is not None else None


def read_all(client: S3Client, prefix: str, skip: str, authority) -> tuple[list, int, str | None]:
    """(statuses of every other node, how many were ignored as unknown, error text or None):
    one LIST and one GET per node.

    A status the bucket fails to give is listed with its error; one too large, of another
    shape or not signed by a member is not listed, only counted; a failed LIST fails it all.
    """
    try:
        page = client.list_objects(prefix=prefix + NODES, max_keys=MAX_NODES)
    except S3Error as exc:
        return [], 0, exc.message
    out, unknown = [], 0
    for item in page.keys:
        name = item["key"][len(prefix + NODES):]
        node_id = name[:-5] if name.endswith(".json") else ""
        if not _NODE_ID.match(node_id) or node_id == skip:
            unknown += node_id != skip
            continue
        try:
            fetched = client.get_bytes(item["key"], max_bytes=STATUS_MAX_BYTES)
        except S3Error as exc:
            if exc.code == "too_large":
                unknown += 1
            else:
                out.append({"node_id": node_id, "unreadable": exc.message})
            continue
        doc = _clean(fetched.body, node_id, authority) if fetched is not None and fetched.body is not None else None
        if doc is None:
            unknown += fetched is not None
            continue
        out.append(doc)
    return out, unknown, None


def _seconds_ago(stamp, now: float) -> float | None:
    try:
        return now - parse_rfc3339(stamp)
    except (TypeError, ValueError, AttributeError):
        return None


def view(statuses: list, seq: int, version: str, poll_seconds: int, now: float) -> list:
    """Each node with what the primary derives: lag (seqs behind), skew, unseen."""
    out = []
    for status in statuses:
        row = dict(status)
        row_seq = status.get("seq")
        row["lag"] = seq - row_seq if type(row_seq) is int else None
        row["version_skew"] = status.get("version") not in (None, version)
        own_poll = status.get("poll_seconds") if type(status.get("poll_seconds")) is int else poll_seconds
        age = _seconds_ago(status.get("seen_at"), now)
        row["unseen"] = age is None or age > UNSEEN_POLLS * max(own_poll, poll_seconds)
        out.append(row)
    return sorted(out, key=lambda r: r["node_id"])


def problems(row: dict) -> set:
    """The incidents a node row shows: notify once when one starts."""
    found = set()
    if row.get("unseen"):
        found.add("unseen")
    # a node that just joined waits for this primary to list it: not an incident of its own
    if (row.get("last_error") and row["last_error"].get("code") != PENDING) or row.get("unreadable"):
        found.add("error")
    return found

