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

from contentnode.core import backup
from contentnode.fileio import DataDirLock, atomic_write, ensure_private_dir


def _passphrase(args):
    if args.passphrase_file:
        with open(args.passphrase_file, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    return os.environ.get("CONTENTNODE_BACKUP_PASSPHRASE") or None


def _article(kind):
    return "an" if kind == "encrypted" else "a"


def run(config, args) -> int:
    from contentnode.api.backup import make_export, restore_into
    from contentnode.daemon import App

    ensure_private_dir(config.data_dir)
    lock = DataDirLock(config.data_dir)
    try:
        lock.acquire()
    except RuntimeError as exc:
        print(f"contentnode: {exc}", file=sys.stderr)
        return 1
    try:
        app = App(config)
        app.load()
        passphrase = _passphrase(args)
        if args.action == "export":
            document = make_export(app, passphrase)
            atomic_write(os.path.abspath(args.file), json.dumps(document, indent=1).encode() + b"\n")
            app.audit.record("backup.export", detail={"kind": document["kind"], "offline": True})
            print(f"wrote {_article(document['kind'])} {document['kind']} backup to {args.file}")
            return 0
        try:
            with open(args.file, "rb") as f:
                document = json.loads(f.read())
        except (OSError, ValueError) as exc:
            print(f"contentnode: cannot read {args.file}: {exc}", file=sys.stderr)
            return 1
        try:
            detail = restore_into(app, document, passphrase, None)
        except backup.BackupError as exc:
            print(f"contentnode: restore refused, nothing changed: {exc}", file=sys.stderr)
            return 1
        print(f"restored {_article(detail['kind'])} {detail['kind']} backup; "
              f"the previous state is in {detail['pre_restore']}")
        return 0
    finally:
        lock.release()


def register(sub) -> None:
    from contentnode.cli import add_data_dir_flags

    p = sub.add_parser("backup", help="export or restore a backup offline")
    p.add_argument("action", choices=("export", "restore"))
    p.add_argument("file", help="the backup file to write or read")
    p.add_argument("--passphrase-file", help="file holding the passphrase (encrypted backups)")
    add_data_dir_flags(p)
    p.set_defaults(run=run)
