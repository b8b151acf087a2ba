"""Command line: `contentnode serve`, `--version`, and the offline commands.

COMMANDS lists the subcommand modules; each adds its parser with
`add_parser(subparsers)` and sets `run(config, args) -> exit code`. Only
`serve` imports the daemon (and with it the admin API); the offline commands
open the data dir through cli/context.py.
"""

import argparse
import sys

from contentnode import __version__
from contentnode import config as config_module
from contentnode.cli import audit, backup, config, fleet, serve, tokens, users
from contentnode.fileio import permission_problem
from contentnode.store import DataDirRefused

COMMANDS = [serve, users, backup, audit, tokens, fleet, config]


def load_config(args):
    flags = {k: getattr(args, k, None) for k in serve.FLAGS}
    return config_module.load(getattr(args, "config", None), flags)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contentnode", description="content routing node daemon")
    parser.add_argument("--version", action="version", version=f"contentnode {__version__}")
    sub = parser.add_subparsers(dest="command")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        config = load_config(args)
        return args.run(config, args)
    except (config_module.ConfigError, DataDirRefused) as exc:  # exit 2: systemd does not retry these
        print(f"contentnode: {exc}", file=sys.stderr)
        return 2
    except PermissionError as exc:
        if not exc.filename:
            raise
        print(f"contentnode: {permission_problem(exc.filename)}; nothing changed", file=sys.stderr)
        return 1
