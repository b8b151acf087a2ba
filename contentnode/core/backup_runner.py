"""Runs of the scheduled backup: seal the node, store it in the bucket, keep the newest N.

One run at a time, whether the schedule or an operator ("run now") starts it.
A run reads the state, seals it with the node's backup passphrase (the
encrypted backup of core/backup.py, which never carries the schedule or the
passphrase), writes it under the prefix, then deletes this node's backups
beyond `keep`; nothing is deleted when the write failed. The outcome goes to
the "backup_status" section, the audit log and, for the first failure of an
incident (failures since the last success), the `backup_failed` event.
A failed run is tried again after 15 min, doubling up to 6 h, or at the next
slot when that comes first.
"""

import json
import logging
import threading

from contentnode.clock import rfc3339
from contentnode.core import backup, settings
from contentnode.core import backup_schedule as sched
from contentnode.core import stored_backups
from contentnode.core.fields import FieldError
from contentnode.core.s3_errors import S3Error

log = logging.getLogger("contentnode.backup")
AUDITED_KEYS = 20  # an audit entry names at most this many pruned keys (lowering keep can prune hundreds)


class Busy(Exception):
    """Another run is under way."""


class RunFailed(Exception):
    """The bucket refused or could not be reached; `error` is the S3Error."""

    def __init__(self, error: S3Error):
        super().__init__(error.message)
        self.error = error


class BackupRunner:
    """store, data_dir, clock, audit and events of the App; get_policy() -> OutboundPolicy."""

    def __init__(self, store, data_dir: str, clock, audit, events, get_policy):
        self.store, self.data_dir, self.clock = store, data_dir, clock
        self.audit, self.events, self.get_policy = audit, events, get_policy
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._lock.locked()

    def tick(self) -> None:
        """The job: run when the schedule says one is due (a run that fails is recorded, not raised)."""
        schedule = sched.effective(self.store.data)
        due = sched.due_at(schedule, self.store.data["backup_status"])
        if due is None or self.clock.now() < due or sched.missing(schedule):
            return
        try:
            self.run("schedule")
        except (Busy, RunFailed):
            pass

    def run(self, trigger: str, user=None) -> dict:
        """One run now: {"key","size","created_at","pruned"}; Busy, RunFailed, or FieldError
        naming what the schedule lacks."""
        if not self._lock.acquire(blocking=False):
            raise Busy("a backup run is already under way")
        try:
            return self._run(trigger, user)
        finally:
            self._lock.release()

    def _run(self, trigger: str, user) -> dict:
        data = self.store.data
        schedule = sched.effective(data)
        lacking = sched.missing(schedule)
        if lacking:
            raise FieldError(f"the backup schedule has no {lacking.replace('_', ' ')} yet", lacking)
        now = self.clock.now()
        node_id = data["node"]["id"]
        key = sched.key_for(schedule["prefix"], node_id, now)
        document = backup.export_encrypted(json.loads(json.dumps(data)), backup.read_files(self.data_dir),
                                           schedule["passphrase"], settings.effective(data)["node_name"], now)
        client = stored_backups.client_for(schedule, self.get_policy(), self.clock.now)
        try:
            size = stored_backups.write(client, key, document)
        except S3Error as exc:
            self._failed(schedule, exc, now, trigger, user)
            raise RunFailed(exc) from None
        pruned, prune_error = [], None
        try:
            pruned = stored_backups.prune(client, schedule["prefix"], node_id, schedule["keep"])
        except S3Error as exc:
            prune_error = exc.message
        result = {"key": key, "size": size, "created_at": rfc3339(now), "pruned": len(pruned)}
        with self.store.transaction() as doc:
            doc["backup_status"] = {"last_run_at": now, "last_ok_at": now, "last_key": key, "last_size": size,
                                    "last_error": None, "failures": 0, "trigger": trigger,
                                    "pruned": len(pruned), "prune_error": prune_error}
        self.audit.record("backup.run", target=key, user=user,
                          detail={"trigger": trigger, "size": size, "pruned": len(pruned),
                                  "pruned_keys": pruned[:AUDITED_KEYS], "prune_error": prune_error})
        return result

    def _failed(self, schedule: dict, error: S3Error, now: float, trigger: str, user) -> None:
        """Record the failure; the first of an incident raises backup_failed."""
        with self.store.transaction() as doc:
            status = dict(doc["backup_status"])
            failures = (status.get("failures") or 0) + 1
            status.update(last_run_at=now, failures=failures, trigger=trigger,
                          last_error={"code": error.code, "message": error.message, "at": now})
            doc["backup_status"] = status
        retry = sched.due_at(schedule, status)
        log.warning("backup run failed (%s, attempt %d): %s", error.code, failures, error.message)
        self.audit.record("backup.run", ok=False, user=user,
                          detail={"trigger": trigger, "code": error.code, "error": error.message})
        if failures == 1:
            self.events.emit("backup_failed", target=f"{schedule['bucket']} at {schedule['endpoint']}",
                             error=error.message, next_try=rfc3339(retry) if retry else "when run by hand")
