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

COMMANDS = {"serve": serve, "user": users, "backup": backup, "audit": audit, "token": tokens, "fleet": fleet,
            "config": config}   # each module's add_parser adds the subcommand of its key


def load_config(args):
    flags = {k: getattr(args, k, None) for k in serve.FLAGS}
    return config_module.load(getattr(args, "config", None), flags)


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The whole command line; when `argv` starts with a subcommand's name, only that subcommand is
    added: the arguments parse, and any message reads, the same, and a daemon's or an offline
    command's start skips building the other parsers (argparse looks up each help text's translation
    on disk: ~10 ms of CPU per process, docs/DEVELOPING.md "Tests")."""
    parser = argparse.ArgumentParser(prog="contentnode", description="content routing node daemon")
    parser.add_argument("--version", action="version", version=f"contentnode {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")   # argparse's own form
    named = argv[0] if argv else None
    for name, command in COMMANDS.items():
        if named not in COMMANDS or name == named:
            command.add_parser(sub)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
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
