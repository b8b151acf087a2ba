"""The scheduled backup's record rules: when it runs, where it goes, what it keeps.

The schedule (state section "backup_schedule") and its run status
("backup_status") are this node's own: no backup carries them and no restore
replaces them (core/backup.py NODE_LOCAL), so a restore from the bucket never
rolls back where backups go, the passphrase that seals them or what was
written since. Times are UTC, the one clock that has no daylight-saving gaps
or repeats. The target is an S3 bucket of its own (endpoint and credentials
by the bucket rules of core/buckets.py), optionally copied from one of the
node's S3 buckets: a folder bucket is refused, as a backup on the node's own
disk does not leave the node. Every broken rule raises FieldError.
"""

import calendar
import re
import secrets
import time

from contentnode.core import buckets
from contentnode.core.fields import FieldError
from contentnode.core.rules import validate_prefix

FREQUENCIES = ("off", "daily", "weekly")
WEEKDAYS = tuple(name.lower() for name in calendar.day_name)  # monday first, as time.gmtime's tm_wday
TARGET_FIELDS = ("endpoint", "region", "bucket", "access_key", "secret_key", "path_style")
DEFAULTS = {"frequency": "off", "weekday": "monday", "hour": 3, "minute": 0, "keep": 7,
            "prefix": "contentnode-backups/"}
MAX_KEEP = 1000
RETRY_FIRST = 15 * 60      # a failed run is tried again after 15 min, then 30, 60 ... at most 6 h,
RETRY_MAX = 6 * 3600       # or at the next slot when that comes first
DAY = 86400
# <prefix>contentnode-<node id>-<UTC time>-<random>.json: the node id says whose it is (retention only
# ever deletes the node's own), the time sorts them oldest first.
_NAME = re.compile(r"contentnode-([0-9a-f]{1,64})-(\d{8}T\d{6}Z)-[0-9a-f]{6}\.json")


def effective(doc) -> dict:
    """The schedule with its defaults filled in."""
    return dict(DEFAULTS, **(doc.get("backup_schedule") or {}))


def new_passphrase() -> str:
    """A generated passphrase: 32 characters, 192 random bits."""
    return secrets.token_urlsafe(24)


def target_fields(body: dict, partial: bool) -> dict:
    """The S3 target fields in body, by the rules of an S3 bucket record."""
    given = {k: body[k] for k in TARGET_FIELDS if k in body}
    if not partial:
        given["name"] = "backup target"
    checked = buckets.record_fields(given, partial=partial, of_kind="s3")
    checked.pop("name", None)
    checked.pop("type", None)
    return checked


def from_bucket(record: dict | None, bucket_id: str) -> dict:
    """The target fields of one of the node's buckets (FieldError on from_bucket when unusable)."""
    if record is None:
        raise FieldError(f"no bucket with id {bucket_id!r}", "from_bucket")
    if buckets.kind(record) != "s3":
        raise FieldError("a folder bucket cannot hold backups: they would not leave the node", "from_bucket")
    return {k: record[k] for k in TARGET_FIELDS if k in record}


def merge(current: dict, body: dict, bucket_record=None) -> dict:
    """The schedule after a partial update: body's fields over from_bucket's over the current ones."""
    new = dict(current)
    if "from_bucket" in body:
        new.update(from_bucket(bucket_record, body["from_bucket"]))
    new.update(target_fields(body, partial=True))
    for name in ("frequency", "weekday", "hour", "minute", "keep"):
        if name in body:
            new[name] = body[name]
    if "prefix" in body:
        new["prefix"] = validate_prefix(body["prefix"])
    if new["frequency"] not in FREQUENCIES:
        raise FieldError("frequency must be one of " + ", ".join(FREQUENCIES), "frequency")
    if new["weekday"] not in WEEKDAYS:
        raise FieldError("weekday must be one of " + ", ".join(WEEKDAYS), "weekday")
    if new.get("endpoint") is not None:
        new.setdefault("path_style", buckets.default_path_style(new["endpoint"]))  # as a new bucket record's
        buckets.check_record(dict(new, type="s3"))
    return new


def missing(schedule: dict) -> str | None:
    """The first thing a run needs that the schedule lacks (a field name), or None."""
    for name in TARGET_FIELDS[:5] + ("passphrase",):
        if not schedule.get(name):
            return name
    return None


def target_set(schedule: dict) -> bool:
    """Whether the schedule names a whole bucket (endpoint, region, bucket and both keys)."""
    return missing(schedule) not in TARGET_FIELDS


def next_slot(schedule: dict, after: float) -> float | None:
    """The first scheduled time strictly after `after` (UTC), None when the schedule is off."""
    frequency = schedule["frequency"]
    if frequency == "off":
        return None
    day = time.gmtime(after)
    midnight = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, 0, 0, 0))
    at = midnight + schedule["hour"] * 3600 + schedule["minute"] * 60
    step = DAY
    if frequency == "weekly":
        at += ((WEEKDAYS.index(schedule["weekday"]) - day.tm_wday) % 7) * DAY
        step = 7 * DAY
    while at <= after:
        at += step
    return at


def retry_delay(failures: int) -> int:
    return min(RETRY_FIRST * 2 ** (failures - 1), RETRY_MAX)


def due_at(schedule: dict, status: dict) -> float | None:
    """When the next automatic run is due: the next slot after the last attempt (or after the
    schedule last changed), or the retry of a failed run when that comes first."""
    last = status.get("last_run_at")
    slot = next_slot(schedule, max(last or 0, schedule.get("updated_at") or 0))
    if slot is None:
        return None
    failures = status.get("failures") or 0
    if failures and last is not None:
        return min(slot, last + retry_delay(failures))
    return slot


def key_for(prefix: str, node_id: str, now: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{prefix}contentnode-{node_id}-{stamp}-{secrets.token_hex(3)}.json"


def parse_key(prefix: str, key: str) -> tuple[str, float] | None:
    """(node id, time) of a stored backup's key under prefix, None for any other object."""
    if not key.startswith(prefix):
        return None
    match = _NAME.fullmatch(key[len(prefix):])
    if match is None:
        return None
    return match.group(1), calendar.timegm(time.strptime(match.group(2), "%Y%m%dT%H%M%SZ"))
