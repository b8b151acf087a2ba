"""Backups (users:manage): POST /api/backup/export and /api/backup/restore.

The export answers the backup document itself, so `curl -o backup.json`
works. A restore validates the whole backup first; a refused one changes
nothing. Backups larger than the 64 KB request limit go through the offline
`contentnode backup` command (contentnode/cli/backup.py).
"""

from contentnode.core import backup
from contentnode.restore import restore_into
from contentnode.http.errors import forbidden, invalid
from contentnode.http.response import json_response
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, nullable, obj, text

def require_admin(req, what: str) -> None:
    """users:manage alone is not enough where the backup reaches beyond user management.

    An encrypted export carries every secret of the node (password hashes, TOTP and
    link keys, bucket and notification secrets, private keys) and a restore replaces
    users, settings, buckets and domains: for a manager who is not an administrator
    either would be more power than the scopes they hold (as creating an administrator
    would be, which users.py refuses them too).
    """
    if req.user["role"] != "admin":
        raise forbidden("forbidden", f"only an administrator may {what}")


def _passphrase(body):
    value = body.get("passphrase")
    try:
        return None if value is None else backup.check_passphrase(value)
    except backup.BackupError as exc:
        raise invalid(str(exc), exc.field) from None


def export(req):
    passphrase = _passphrase(req.body or {})  # the shape is EXPORT_BODY's
    if passphrase is not None:
        require_admin(req, "export an encrypted backup (it holds every secret of the node)")
    document = backup.make_export(req.app.store.data, req.app.data_dir, passphrase, req.app.clock.now())
    req.audit("backup.export", detail={"kind": document["kind"]})
    stamp = document["created_at"].replace(":", "").replace("-", "")
    return json_response(document, headers={
        "Content-Disposition": f'attachment; filename="contentnode-{document["kind"]}-{stamp}.json"'})


def restore(req):
    require_admin(req, RESTORE_NEEDS_ADMIN)
    return restore_document(req, req.body["backup"], req.body.get("passphrase"))


def restore_document(req, document, passphrase, source=None, passphrase_hint=None) -> dict:
    """One restore for the request's user (already checked: an administrator), its audit and event.

    `source` names a stored backup's key (audited and answered as from_bucket); `passphrase_hint`
    replaces the message of a passphrase that does not open the backup (field key)."""
    try:
        detail = restore_into(req.app, document, passphrase, req.user, req.client_ip,
                              keep_session=req.session["id"], restore_credentials=req.body.get("restore_credentials"),
                              source=source)
    except backup.BackupError as exc:
        req.audit("backup.restore", ok=False,
                  detail={"error": str(exc), **({"from_bucket": source} if source else {})})
        if exc.field == "passphrase" and passphrase_hint:
            raise invalid(passphrase_hint, "key") from None
        raise invalid(str(exc), exc.field) from None
    req.app.apply_policy()
    req.app.events.emit("backup_restored", kind=detail["kind"], created_at=detail["created_at"],
                        by=req.user["username"])
    return dict(detail, restored=True)


RESTORE_NEEDS_ADMIN = "restore a backup (it replaces users, settings and secrets)"
_PASSPHRASE = nullable(text(1024, min_length=8))
EXPORT_BODY = obj({"passphrase": _PASSPHRASE}, description="a passphrase makes an encrypted backup")
RESTORE_BODY = obj({"backup": {"type": "object"}, "passphrase": _PASSPHRASE, "restore_credentials": BOOLEAN},
                   required=["backup"],
                   description="restore_credentials: true brings the backup's passwords, second factors, "
                               "accounts, tokens, link keys, channel and bucket secrets and certificates as they "
                               "were (encrypted backups only)")
_TOKEN_REF = answer({"id": STRING, "name": STRING, "user": nullable(STRING)})
_NAMES = array(STRING)
RESTORED = answer({
    "restored": BOOLEAN, "kind": STRING, "created_at": nullable(STRING), "pre_restore": STRING,
    "from_bucket": STRING,
    "restore_credentials": BOOLEAN, "sessions_ended": {"type": "integer", "minimum": 0},
    "kept": answer({"tokens_revoked": array(_TOKEN_REF), "tokens_created": array(_TOKEN_REF),
                    "users_deleted": _NAMES, "users_created": _NAMES,
                    "users_credentials": array(answer({"user": STRING, "kept": _NAMES})),
                    "link_keys_retired": _NAMES, "link_keys_created": _NAMES,
                    "notification_channels": _NAMES, "bucket_credentials": _NAMES, "certificates": _NAMES}),
}, optional=("from_bucket",))

ROUTES = [
    Route("POST", "/api/backup/export", "users:manage", export, body=EXPORT_BODY, body_optional=True),
    Route("POST", "/api/backup/restore", "users:manage", restore, body=RESTORE_BODY, answer=RESTORED,
          token_session=False, fleet_shared=True),
]
