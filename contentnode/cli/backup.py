"""`contentnode backup export|restore FILE`: the API's backup, offline.

For backups larger than the 64 KB request limit, and for a node whose daemon
will not start. It takes the data dir lock, so it refuses to run beside a
running daemon. The passphrase comes from --passphrase-file or the
CONTENTNODE_BACKUP_PASSPHRASE environment variable, never from the command
line (where `ps` would show it).
"""

import json
import os
import sys

from contentnode.auth.policy import ACCOUNT_SECTIONS
from contentnode.cli.context import Refused, add_data_dir_flags, open_offline
from contentnode.core import backup
from contentnode.restore import restore_into
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


def restore(ctx, args) -> str:
    try:
        with open(args.file, "rb") as f:
            document = json.loads(f.read())
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot read {args.file}: {exc}") from None
    try:
        detail = restore_into(ctx, document, _passphrase(args), None, restore_credentials=args.restore_credentials)
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
             ("current credentials kept", credentials)]
    return [f"{what}: {names}" for what, names in shown if names]


def run(config, args) -> int:
    """Export with the account sections' context; a restore needs the node's whole schema."""
    sections = SECTIONS if args.action == "restore" else ACCOUNT_SECTIONS
    try:
        with open_offline(config, create=True, sections=sections) as ctx:
            print((export if args.action == "export" else restore)(ctx, args))
    except Refused as exc:
        print(f"contentnode: {exc}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("backup", help="export or restore a backup offline")
    p.add_argument("action", choices=("export", "restore"))
    p.add_argument("file", help="the backup file to write or read")
    p.add_argument("--passphrase-file", help="file holding the passphrase (encrypted backups)")
    p.add_argument("--restore-credentials", action="store_true",
                   help="restore: bring the backup's passwords, second factors, accounts and tokens as they "
                        "were (by default a restore keeps the node's current ones)")
    add_data_dir_flags(p)
    p.set_defaults(run=run)
