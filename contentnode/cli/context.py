"""The offline commands' context: the data dir's store, sessions, audit log and hasher.

Offline commands run with the daemon stopped. They take the data-dir lock, so
they refuse to run beside a running daemon, whose copy of the state would
overwrite theirs. They open only what they edit, never the App (no routes,
listeners or background jobs, no contentnode.api).
"""

import os
import sys
from contextlib import contextmanager

from contentnode.auth.passwords import PasswordHasher
from contentnode.auth.policy import ACCOUNT_SECTIONS
from contentnode.auth.sessions import SessionManager
from contentnode.clock import Clock
from contentnode.config import DEFAULT_DATA_DIR
from contentnode.core.audit import AuditLog
from contentnode.fileio import DataDirLock
from contentnode.schema import REVISIONED
from contentnode.store import STATE_FILE, Store, StoreError, claim_data_dir

AGENT = "contentnode command line"


class Refused(Exception):
    """A clear reason to stop with exit code 1, nothing changed."""


class OfflineContext:
    """What an offline command may touch; built by open_offline under the data-dir lock."""

    def __init__(self, config, clock: Clock, sections):
        self.config = config
        self.clock = clock
        self.data_dir = config.data_dir
        self.store = Store(config.data_dir, sections, revisioned=REVISIONED)
        self.store.load()
        self.sessions = SessionManager(config.data_dir, self.store, clock)
        self.sessions.load()
        self.audit = AuditLog(config.data_dir, clock)
        self.hasher = PasswordHasher(config.hash_memory_kib, config.hash_time_cost, config.max_concurrent_hashes)


@contextmanager
def open_offline(config, create: bool = False, sections=ACCOUNT_SECTIONS):
    """An OfflineContext on the data dir, loaded under the data-dir lock; Refused when it cannot be."""
    if not create and not os.path.exists(os.path.join(config.data_dir, STATE_FILE)):
        raise Refused(f"no node data in {config.data_dir}: start the daemon once with this data dir (its first "
                      "start makes it), or name the node's data dir with --data-dir")
    claim_data_dir(config.data_dir)
    lock = DataDirLock(config.data_dir)
    try:
        lock.acquire()
    except RuntimeError as exc:
        raise Refused(str(exc)) from None
    try:
        ctx = OfflineContext(config, Clock.from_environment(), sections)
        yield ctx
        ctx.sessions.flush()
    except StoreError as exc:
        raise Refused(str(exc)) from None
    finally:
        lock.release()


def runner(action, create_data_dir: bool = False, sections=ACCOUNT_SECTIONS):
    """run(config, args) for an action(ctx, args) -> message; Refused becomes exit code 1."""
    def run(config, args) -> int:
        try:
            with open_offline(config, create=create_data_dir, sections=sections) as ctx:
                print(action(ctx, args))
        except Refused as exc:
            print(f"contentnode: {exc}; nothing changed", file=sys.stderr)
            return 1
        return 0
    return run


def add_data_dir_flags(parser) -> None:
    parser.add_argument("--config", help="TOML config file (default: $CONTENTNODE_CONFIG, else none)")
    parser.add_argument("--data-dir", help=f"the node's data dir (default: {DEFAULT_DATA_DIR} in the current "
                                           "folder, unless the config file or $CONTENTNODE_DATA_DIR names one)")
