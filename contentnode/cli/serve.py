"""`contentnode serve`: run the daemon (admin API and public port)."""

import sys


def run(config, args) -> int:
    from contentnode.daemon import serve  # the whole App: only this command needs it
    from contentnode.store import StoreError

    try:
        return serve(config)
    except (StoreError, RuntimeError, OSError) as exc:
        print(f"contentnode: cannot start: {exc}", file=sys.stderr)
        return 1


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the daemon (admin API and public port)")
    p.add_argument("--config", help="TOML config file")
    p.add_argument("--data-dir", help="folder for state, keys, certificates, cache and logs")
    p.add_argument("--admin-port", help="admin API port (default 9090)")
    p.add_argument("--admin-bind", help="admin API address (default 127.0.0.1)")
    p.add_argument("--public-port", help="public port (default 8080)")
    p.add_argument("--public-bind", help="public address (default 0.0.0.0)")
    p.set_defaults(run=run)
