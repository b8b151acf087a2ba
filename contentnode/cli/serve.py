"""`contentnode serve`: run the daemon (admin API and public port)."""

import gc
import sys

from contentnode.config import OPTIONS
from contentnode.fileio import permission_problem

FLAGS = ("data_dir", "admin_port", "admin_bind", "public_port", "public_bind", "log_level", "folder_roots",
         "access_log")


def run(config, args) -> int:
    # No garbage collection while the daemon imports and builds its App: tens of thousands of objects
    # that live as long as the process, traversed again and again for a few hundred of garbage;
    # daemon.serve freezes them and turns collection back on once the node is started.
    gc.disable()
    from contentnode.daemon import MissingDependency, serve  # the whole App: only this command needs it
    from contentnode.core.migrations import NewerStateError, StoreError

    try:
        return serve(config)
    except (StoreError, RuntimeError, OSError) as exc:
        print(f"contentnode: cannot start: {_reason(exc)}", file=sys.stderr)
        return 2 if isinstance(exc, (NewerStateError, MissingDependency)) else 1   # 2: restarting cannot help


def _reason(exc: Exception) -> str:
    """A path that cannot be written is explained (owner, mode, fix); the rest say enough."""
    if isinstance(exc, PermissionError) and exc.filename:
        return permission_problem(exc.filename)
    return str(exc)


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the daemon (admin API and public port)",
                       description="Values come from defaults < --config file < CONTENTNODE_* environment < flags.")
    p.add_argument("--config", help="TOML config file (default: $CONTENTNODE_CONFIG, else none)")
    for option in OPTIONS:
        if option.name in FLAGS:
            p.add_argument("--" + option.name.replace("_", "-"), choices=option.choices,
                           help=option.help if option.default is None else f"{option.help} (default: {option.default})")
    p.set_defaults(run=run)
