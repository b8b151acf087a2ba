"""`contentnode backup export|restore FILE` and `backup list|restore --from-bucket KEY`, offline.

For backups larger than the 64 KB request limit, and for a node whose daemon
will not start. It takes the data dir lock, so it refuses to run beside a
running daemon. The passphrase comes from --passphrase-file or the
CONTENTNODE_BACKUP_PASSPHRASE environment variable, never from the command
line (where `ps` would show it). `list` and `--from-bucket` read the
scheduled backups' bucket, and a stored backup opens with the passphrase the
node holds for them (docs/API.md, "Scheduled backups").
"""

import json
import os
import sys

from contentnode.clock import rfc3339
from contentnode.auth.policy import ACCOUNT_SECTIONS
from contentnode.cli.context import Refused, add_data_dir_flags, open_offline
from contentnode.core import backup, settings, stored_backups
from contentnode.core import backup_schedule as sched
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.s3_errors import S3Error
from contentnode.fileio import atomic_write
from contentnode.schema import SECTIONS


def _passphrase(args):
    if args.passphrase_file:
        with open(args.passphrase_file, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    return os.environ.get("CONTENTNODE_BACKUP_PASSPHRASE") or None


def _article(kind):
    return "an" if kind == "encrypted" else "a"


def export(ctx, args) -> str:
    document = backup.make_export(ctx.store.data, ctx.data_dir, _passphrase(args), ctx.clock.now())
    atomic_write(os.path.abspath(args.file), json.dumps(document, indent=1).encode() + b"\n")
    ctx.audit.record("backup.export", detail={"kind": document["kind"], "offline": True})
    return f"wrote {_article(document['kind'])} {document['kind']} backup to {args.file}"


def _bucket(ctx):
    """(schedule, client) of the scheduled backups' bucket, as the daemon would reach it."""
    schedule = sched.effective(ctx.store.data)
    if not sched.target_set(schedule):
        raise Refused("no backup bucket is set (PUT /api/backup/schedule, or the Backup page)")
    policy = OutboundPolicy.for_node(settings.effective(ctx.store.data), ctx.config.admin_port,
                                     ctx.config.dns_resolver)
    return schedule, stored_backups.client_for(schedule, policy, ctx.clock.now)


def list_stored(ctx, args) -> str:
    schedule, client = _bucket(ctx)
    try:
        found = stored_backups.listing(client, schedule["prefix"], ctx.store.data["node"]["id"])
    except S3Error as exc:
        raise Refused(f"the backup bucket failed ({exc.code}): {exc.message}") from None
    lines = [f"{len(found)} backup(s) in {schedule['bucket']} under {schedule['prefix']!r}, newest first"]
    lines += [f"{rfc3339(b['created_at'])}  {b['size']:>10}  {b['key']}{'' if b['own'] else '  (another node)'}"
              for b in found]
    return "\n".join(lines)


def _stored_document(ctx, key):
    schedule, client = _bucket(ctx)
    if not schedule.get("passphrase"):
        raise Refused("the node holds no backup passphrase")
    try:
        return stored_backups.fetch(client, schedule["prefix"], key), schedule["passphrase"]
    except (backup.BackupError, S3Error) as exc:
        raise Refused(f"cannot read {key!r} from the backup bucket: {exc}") from None


def _file_document(args):
    if args.file is None:
        raise Refused("restore needs a backup FILE, or --from-bucket KEY")
    try:
        with open(args.file, "rb") as f:
            return json.loads(f.read()), _passphrase(args)
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {args.file}: {exc}") from None


def _refuse_on_replica(ctx) -> None:
    """Like POST /api/backup/restore (409 managed_by_fleet): a replica's shared objects are the
    primary's, and a restore would roll them back under it. A primary may restore: its next
    start publishes what it restored."""
    from contentnode.fleet.service import state_of   # the fleet, and the restore below, only here:
    state = state_of(ctx.store.data)                 # not in every command's start
    if state.get("role") == "replica":
        raise Refused(f"restore refused, nothing changed: this node is a fleet replica (its shared objects come "
                      f"from the primary, node {state.get('primary') or 'unknown'}): leave the fleet first "
                      f"(POST /api/fleet/leave, or the Fleet page), or restore on the primary")


def restore(ctx, args) -> str:
    from contentnode.restore import restore_into
    _refuse_on_replica(ctx)
    if args.from_bucket is not None and args.file is not None:
        raise Refused("restore takes a backup FILE or --from-bucket KEY, not both")
    if args.from_bucket is not None:
        document, passphrase = _stored_document(ctx, args.from_bucket)
    else:
        document, passphrase = _file_document(args)
    try:
        detail = restore_into(ctx, document, passphrase, None, restore_credentials=args.restore_credentials,
                              source=args.from_bucket)
    except backup.BackupError as exc:
        raise Refused(f"restore refused, nothing changed: {exc}") from None
    lines = [f"restored {_article(detail['kind'])} {detail['kind']} backup; "
             f"the previous state is in {detail['pre_restore']}; {detail['sessions_ended']} session(s) ended"]
    if detail["restore_credentials"]:
        lines.append("credentials restored as the backup had them (--restore-credentials)")
    lines += [f"kept: {line}" for line in _kept_lines(detail["kept"])]
    return "\n".join(lines)


def _kept_lines(kept: dict) -> list:
    """What the restore kept of the node's credentials, one line per kind (the API answer's "kept")."""
    tokens = {key: ", ".join(f"{t['name']} ({t['user']})" for t in kept[key])
              for key in ("tokens_revoked", "tokens_created")}
    credentials = ", ".join(f"{c['user']} ({'/'.join(c['kept'])})" for c in kept["users_credentials"])
    shown = [("tokens revoked since the backup stay revoked", tokens["tokens_revoked"]),
             ("tokens made since the backup stay", tokens["tokens_created"]),
             ("users deleted since the backup stay deleted", ", ".join(kept["users_deleted"])),
             ("users made since the backup stay", ", ".join(kept["users_created"])),
             ("current credentials kept", credentials),
             ("link keys retired since the backup stay retired", ", ".join(kept["link_keys_retired"])),
             ("link keys made since the backup stay", ", ".join(kept["link_keys_created"])),
             ("current notification secrets kept", ", ".join(kept["notification_channels"])),
             ("current bucket credentials kept", ", ".join(kept["bucket_credentials"])),
             ("current certificates kept", ", ".join(kept["certificates"]))]
    return [f"{what}: {names}" for what, names in shown if names]


ACTIONS = {"export": export, "restore": restore, "list": list_stored}


def run(config, args) -> int:
    """Export with the account sections' context; a restore and the list need the node's whole schema."""
    sections = ACCOUNT_SECTIONS if args.action == "export" else SECTIONS
    try:
        if args.action == "export" and args.file is None:
            raise Refused("export needs the FILE to write")
        with open_offline(config, create=args.action != "list", sections=sections) as ctx:
            print(ACTIONS[args.action](ctx, args))
    except Refused as exc:
        print(f"contentnode: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("backup", help="export or restore a backup offline, or list and restore the scheduled "
                                      "backups in their bucket")
    p.add_argument("action", choices=tuple(ACTIONS))
    p.add_argument("file", nargs="?", help="the backup file to write or read (export, restore)")
    p.add_argument("--from-bucket", metavar="KEY", help="restore: the stored backup KEY (see `backup list`) from "
                                                        "the scheduled backups' bucket, opened with the node's "
                                                        "backup passphrase")
    p.add_argument("--passphrase-file", help="file holding the passphrase (encrypted backups)")
    p.add_argument("--restore-credentials", action="store_true",
                   help="restore: bring the backup's passwords, second factors, accounts and tokens as they "
                        "were (by default a restore keeps the node's current ones)")
    add_data_dir_flags(p)
    p.set_defaults(run=run)
