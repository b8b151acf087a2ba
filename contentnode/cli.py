"""Command line: `contentnode serve`, `--version`, and the offline commands."""

import argparse
import sys

from contentnode import __version__, config as config_module


def _add_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the daemon (admin API and public port)")
    p.add_argument("--config", help="TOML config file")
    p.add_argument("--data-dir", help="folder for state, keys, certificates, cache and logs")
    p.add_argument("--admin-port", help="admin API port (default 9090)")
    p.add_argument("--admin-bind", help="admin API address (default 127.0.0.1)")
    p.add_argument("--public-port", help="public port (default 8080)")
    p.add_argument("--public-bind", help="public address (default 0.0.0.0)")


def load_config(args):
    flags = {k: getattr(args, k, None) for k in
             ("data_dir", "admin_port", "admin_bind", "public_port", "public_bind")}
    return config_module.load(getattr(args, "config", None), flags)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contentnode", description="content routing node daemon")
    parser.add_argument("--version", action="version", version=f"contentnode {__version__}")
    sub = parser.add_subparsers(dest="command")
    _add_serve(sub)
    for register in OFFLINE_COMMANDS:
        register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        config = load_config(args)
    except config_module.ConfigError as exc:
        print(f"contentnode: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        from contentnode.daemon import serve
        from contentnode.store import StoreError
        try:
            return serve(config)
        except (StoreError, RuntimeError, OSError) as exc:
            print(f"contentnode: cannot start: {exc}", file=sys.stderr)
            return 1
    return args.run(config, args)


# Offline subcommands register here: register(subparsers) adds a parser whose
# `run(config, args) -> exit code` is set with set_defaults(run=...), and takes
# the same --config/--data-dir flags through add_data_dir_flags.
OFFLINE_COMMANDS = []


def _register_backup(sub) -> None:
    from contentnode.backup_cli import register
    register(sub)


OFFLINE_COMMANDS.append(_register_backup)


def _register_users(sub) -> None:
    from contentnode.cli_users import register
    register(sub)


OFFLINE_COMMANDS.append(_register_users)


def add_data_dir_flags(parser) -> None:
    parser.add_argument("--config", help="TOML config file")
    parser.add_argument("--data-dir", help="the node's data dir")
