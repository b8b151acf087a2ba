"""The scheduled backups in their bucket: write one, list them, keep the newest N, fetch one.

Used by the daemon's runs and routes and by the offline `contentnode backup
list|restore --from-bucket`, so both read the bucket the same way. Only keys
named as core/backup_schedule.py names them count as backups; retention
deletes only this node's own (its node id in the name), never another
node's backups or any other object under the prefix.
"""

import json

from contentnode.core import backup_schedule as sched
from contentnode.core.backup import BackupError
from contentnode.core.s3 import PUT_MAX_BYTES, S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.core.s3_records import BucketConfig
from contentnode.core.text import json_loads

TIMEOUT = 60.0          # seconds for one bucket call (a backup of many certificates is megabytes)
MAX_PAGES = 10          # a listing reads at most 10,000 keys under the prefix
MAX_LISTED = 1000       # and answers the newest 1,000 backups


def client_for(schedule: dict, policy, clock) -> S3Client:
    """A client on the schedule's target; `clock` gives the signing time."""
    return S3Client(BucketConfig.from_record(schedule), policy, TIMEOUT, clock)


def _backups(client: S3Client, prefix: str) -> list:
    """Every backup under prefix: {"key","created_at" (epoch),"size","node"}, oldest first."""
    found, token = [], None
    for _ in range(MAX_PAGES):
        page = client.list_objects(prefix=prefix, token=token)
        for item in page.keys:
            parsed = sched.parse_key(prefix, item["key"] or "")
            if parsed is not None:
                found.append({"key": item["key"], "created_at": parsed[1], "size": item["size"], "node": parsed[0]})
        if not page.truncated or not page.next_token:
            break
        token = page.next_token
    return sorted(found, key=lambda b: (b["created_at"], b["key"]))


def listing(client: S3Client, prefix: str, node_id: str) -> list:
    """The newest MAX_LISTED backups, newest first, each marked `own` when this node wrote it."""
    return [dict(b, own=b["node"] == node_id) for b in reversed(_backups(client, prefix)[-MAX_LISTED:])]


def write(client: S3Client, key: str, document: dict) -> int:
    """Store one sealed backup document; returns its size in bytes."""
    body = json.dumps(document, separators=(",", ":")).encode()
    client.put_object(key, body, "application/json")
    return len(body)


def prune(client: S3Client, prefix: str, node_id: str, keep: int) -> list:
    """Delete this node's backups beyond the newest `keep`; returns the keys deleted."""
    own = [b["key"] for b in _backups(client, prefix) if b["node"] == node_id]
    doomed = own[:-keep] if keep else own
    for key in doomed:
        client.delete_object(key)
    return doomed


def fetch(client: S3Client, prefix: str, key: str) -> dict:
    """One stored backup's document. BackupError (field key) for a key that names no backup
    under the prefix, or an object that is not one; S3Error when the bucket fails."""
    if sched.parse_key(prefix, key) is None:
        raise BackupError(f"{key!r} is not the name of a scheduled backup under {prefix!r}", "key")
    got = client.get_bytes(key, max_bytes=PUT_MAX_BYTES)
    if got is None:
        raise S3Error("no_such_key", f"no backup {key!r} in the bucket", 404)
    try:
        return json_loads(got.body or b"")
    except ValueError:
        raise BackupError(f"the object {key!r} is not a JSON backup", "key") from None
