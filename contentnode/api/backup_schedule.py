"""Scheduled backups to a bucket (users:manage): the schedule, "run now", the stored backups.

GET/PUT /api/backup/schedule, POST /api/backup/schedule/run, GET
/api/backup/stored, POST /api/backup/stored/restore. Changing the schedule
(where every secret of the node goes, sealed with which passphrase) and
restoring need an administrator, as an encrypted export and a restore do
(api/backup.py); a token session may do neither. The passphrase is
write-only: an answer shows it once, when the node generated it.
"""

from contentnode.api.backup import RESTORE_NEEDS_ADMIN, RESTORED, require_admin, restore_document
from contentnode.clock import rfc3339
from contentnode.core import backup, revisions, stored_backups
from contentnode.core import backup_schedule as sched
from contentnode.core.backup_runner import Busy, RunFailed
from contentnode.core.buckets import KINDS
from contentnode.core.rules import MAX_PREFIX
from contentnode.core.s3_errors import S3Error
from contentnode.http.errors import ApiError, conflict, invalid, not_found
from contentnode.http.router import Route
from contentnode.http.schema import (BOOLEAN, STRING, answer, array, integer, nullable, obj, one_of, refused,
                                     text)

NEEDS_ADMIN = "change the backup schedule (its backups carry every secret of the node)"
NOT_SET = "no backup bucket and passphrase are set yet: PUT /api/backup/schedule first"
INTEGER = {"type": "integer"}


def _status_view(app) -> dict:
    status = app.store.data["backup_status"]
    error = status.get("last_error")
    return {"running": app.backups.running, "last_run_at": rfc3339(status.get("last_run_at")),
            "last_ok_at": rfc3339(status.get("last_ok_at")), "last_key": status.get("last_key"),
            "last_size": status.get("last_size"), "trigger": status.get("trigger"),
            "last_error": dict(error, at=rfc3339(error["at"])) if error else None,
            "failures": status.get("failures") or 0, "pruned": status.get("pruned") or 0,
            "prune_error": status.get("prune_error")}


def view(app) -> dict:
    """The schedule as answers show it: no secret, its revision, the next run and the last one."""
    doc = app.store.data
    schedule = sched.effective(doc)
    due = None if sched.missing(schedule) else sched.due_at(schedule, doc["backup_status"])
    shown = {name: schedule[name] for name in ("frequency", "weekday", "hour", "minute", "keep", "prefix")}
    shown.update({name: schedule.get(name) for name in ("endpoint", "region", "bucket", "access_key", "path_style")})
    return dict(shown, time_zone="UTC", secret_key_set=bool(schedule.get("secret_key")),
                passphrase_set=bool(schedule.get("passphrase")),
                passphrase_set_at=rfc3339(schedule.get("passphrase_set_at")),
                updated_at=rfc3339(schedule.get("updated_at")), next_run_at=rfc3339(due),
                revision=revisions.of_section(doc, "backup_schedule"), status=_status_view(app))


def get_schedule(req):
    return view(req.app)


def _new_passphrase(body) -> str | None:
    if body.get("generate_passphrase") and "passphrase" in body:
        raise invalid("send a passphrase or generate_passphrase, not both", "generate_passphrase")
    if body.get("generate_passphrase"):
        return sched.new_passphrase()
    if "passphrase" in body:
        try:
            return backup.check_passphrase(body["passphrase"])
        except backup.BackupError as exc:
            raise invalid(str(exc), exc.field) from None
    return None


def put_schedule(req):
    body = req.body
    if not body:  # a shape error, answered before the role check as every malformed body is
        raise invalid("nothing to change")
    require_admin(req, NEEDS_ADMIN)
    passphrase = _new_passphrase(body)
    now = req.app.clock.now()
    with req.app.store.transaction() as doc:
        revisions.require("the backup schedule", revisions.of_section(doc, "backup_schedule"), req.if_match)
        source = doc["buckets"].get(body["from_bucket"]) if "from_bucket" in body else None
        schedule = sched.merge(sched.effective(doc), body, source)
        if passphrase is not None:
            schedule.update(passphrase=passphrase, passphrase_set_at=now)
        lacking = sched.missing(schedule)
        if schedule["frequency"] != "off" and lacking:
            raise invalid(f"{lacking} is needed before backups can run on a schedule", lacking)
        schedule["updated_at"] = now
        doc["backup_schedule"] = schedule
    req.audit("backup.schedule", detail={"changed": sorted(body), "frequency": schedule["frequency"],
                                         "bucket": schedule.get("bucket"), "prefix": schedule["prefix"]})
    shown = view(req.app)
    if body.get("generate_passphrase"):
        shown["generated_passphrase"] = passphrase  # shown this once: the node never answers it again
    return shown


def run_now(req):
    try:
        return req.app.backups.run("manual", req.user)
    except Busy as exc:
        raise conflict("in_progress", str(exc)) from None
    except RunFailed as exc:
        raise _bucket_failed(exc.error) from None


def _client(req, schedule: dict):
    return stored_backups.client_for(schedule, req.app.outbound(), req.app.clock.now)


def _bucket_failed(error: S3Error) -> ApiError:
    if error.code == "no_such_key":
        return not_found(error.message)
    return ApiError(502, "backup_bucket_failed", f"the backup bucket failed ({error.code}): {error.message}")


def list_stored(req):
    schedule = sched.effective(req.app.store.data)
    if not sched.target_set(schedule):
        return {"backups": [], "bucket": None, "prefix": schedule["prefix"]}  # no bucket: nothing stored there
    try:
        found = stored_backups.listing(_client(req, schedule), schedule["prefix"], req.app.store.data["node"]["id"])
    except S3Error as exc:
        raise _bucket_failed(exc) from None
    return {"backups": [dict(b, created_at=rfc3339(b["created_at"])) for b in found],
            "bucket": schedule["bucket"], "prefix": schedule["prefix"]}


def restore_stored(req):
    require_admin(req, RESTORE_NEEDS_ADMIN)
    schedule = sched.effective(req.app.store.data)
    if not sched.target_set(schedule) or not schedule.get("passphrase"):
        raise conflict("conflict", NOT_SET)
    key = req.body["key"]
    try:
        document = stored_backups.fetch(_client(req, schedule), schedule["prefix"], key)
    except backup.BackupError as exc:
        raise invalid(str(exc), exc.field) from None
    except S3Error as exc:
        raise _bucket_failed(exc) from None
    return restore_document(req, document, schedule["passphrase"], source=key, passphrase_hint=(
        "this backup does not open with the node's backup passphrase (it was sealed with another one: "
        "restore it with POST /api/backup/restore and that passphrase)"))


_TARGET = {name: f.shape for name, f in KINDS["s3"].items()}   # an S3 bucket's members
SCHEDULE_BODY = obj(dict(
    _TARGET, frequency=one_of(*sched.FREQUENCIES), weekday=one_of(*sched.WEEKDAYS), hour=integer(0, 23),
    minute=integer(0, 59), keep=integer(1, sched.MAX_KEEP), prefix=text(MAX_PREFIX, min_length=0),
    from_bucket=text(64), passphrase=text(1024, min_length=8), generate_passphrase=BOOLEAN),
    description="a partial update; times are UTC; from_bucket: copy endpoint, region, bucket and credentials "
                "from one of the node's S3 buckets (fields sent beside it win); a schedule other than off needs "
                "a complete target and a passphrase")
_TIME = nullable(STRING)
SCHEDULE = answer({
    "frequency": one_of(*sched.FREQUENCIES), "weekday": one_of(*sched.WEEKDAYS), "hour": INTEGER,
    "minute": INTEGER, "keep": INTEGER, "prefix": STRING, "time_zone": STRING,
    **{name: nullable(STRING) for name in ("endpoint", "region", "bucket", "access_key")},
    "path_style": {"type": ["boolean", "null"]}, "secret_key_set": BOOLEAN, "passphrase_set": BOOLEAN,
    "passphrase_set_at": _TIME, "updated_at": _TIME, "next_run_at": _TIME, "revision": INTEGER,
    "generated_passphrase": STRING, "secret_key": refused("is write-only"), "passphrase": refused("is write-only"),
    "status": answer({"running": BOOLEAN, "last_run_at": _TIME, "last_ok_at": _TIME, "last_key": nullable(STRING),
                      "last_size": {"type": ["integer", "null"]}, "trigger": nullable(STRING),
                      "last_error": {"type": ["object", "null"]}, "failures": INTEGER, "pruned": INTEGER,
                      "prune_error": nullable(STRING)}),
}, optional=("generated_passphrase", "secret_key", "passphrase"))
RUN = answer({"key": STRING, "size": INTEGER, "created_at": STRING, "pruned": INTEGER})
STORED = answer({"backups": array(answer({"key": STRING, "created_at": STRING, "size": INTEGER, "node": STRING,
                                          "own": BOOLEAN})),
                 "bucket": nullable(STRING), "prefix": STRING})
STORED_RESTORE_BODY = obj({"key": text(1024), "restore_credentials": BOOLEAN}, required=["key"],
                          description="key: one of GET /api/backup/stored; the node's backup passphrase opens it")

ROUTES = [
    Route("GET", "/api/backup/schedule", "users:manage", get_schedule, answer=SCHEDULE),
    Route("PUT", "/api/backup/schedule", "users:manage", put_schedule, body=SCHEDULE_BODY, answer=SCHEDULE,
          if_match=True, token_session=False),
    Route("POST", "/api/backup/schedule/run", "users:manage", run_now, body=obj({}), body_optional=True, answer=RUN,
          upstream=True),
    Route("GET", "/api/backup/stored", "users:manage", list_stored, answer=STORED, upstream=True),
    Route("POST", "/api/backup/stored/restore", "users:manage", restore_stored, body=STORED_RESTORE_BODY,
          answer=RESTORED, token_session=False, upstream=True, fleet_shared=True),
]
