"""`contentnode fleet status|join`: the fleet, offline (docs/API.md, Fleet).

`status` only reads the state file, so it also works beside a running daemon.
`join` takes the data-dir lock (the daemon must be stopped) and does what
POST /api/fleet/join does, for a node set up by script; the code comes from
the argument or, when omitted, from standard input (out of the shell history).
"""

import json
import os
import sys

from contentnode import __version__
from contentnode.cli.context import AGENT, Refused, add_data_dir_flags, open_offline
from contentnode.core import settings
from contentnode.core.folders import FolderRoots
from contentnode.core.netguard import OutboundPolicy
from contentnode.schema import SECTIONS
from contentnode.store import STATE_FILE

# contentnode.fleet is imported by the two actions, not by every command's start (cli/__init__.py
# imports each command module to build the parser).


def status(config) -> int:
    from contentnode.fleet.service import view_of
    try:
        with open(os.path.join(config.data_dir, STATE_FILE), "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as exc:
        print(f"contentnode: cannot read the node's state in {config.data_dir}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(view_of(doc, config.fleet_poll_seconds, [], None), indent=1))
    return 0


def join(config, args) -> int:
    from contentnode.fleet import enrol, wire
    from contentnode.fleet.service import Fleet
    code = args.code if args.code is not None else sys.stdin.read().strip()
    try:
        with open_offline(config, sections=SECTIONS) as ctx:
            # the daemon's outbound rule (the node's own admin port refused), as the API's join has
            fleet = Fleet(store=ctx.store, data_dir=ctx.data_dir, clock=ctx.clock,
                          poll_seconds=config.fleet_poll_seconds, version=__version__,
                          folder_roots=FolderRoots(config.folder_roots, ctx.data_dir),  # for the answer's cannot_take
                          outbound=lambda: OutboundPolicy.for_node(settings.effective(ctx.store.data),
                                                                   config.admin_port, config.dns_resolver))
            try:
                result = enrol.join(fleet, code, args.dry_run)
            except wire.Refused as exc:
                raise Refused(f"{exc.code}: {exc.message}") from None
            if not args.dry_run:
                ctx.audit.record("fleet.join", target=result["fleet_id"],
                                 detail={"primary": result["primary"], "offline": True}, user_agent=AGENT)
    except Refused as exc:
        print(f"contentnode: {exc}; nothing changed", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=1))
    return 0


def run(config, args) -> int:
    return status(config) if args.action == "status" else join(config, args)


def add_parser(sub) -> None:
    p = sub.add_parser("fleet", help="a fleet's status, or join one offline")
    p.add_argument("action", choices=("status", "join"))
    p.add_argument("code", nargs="?", help="join: the cnj_ join code (read from stdin when omitted)")
    p.add_argument("--dry-run", action="store_true", help="join: only say what would be replaced")
    add_data_dir_flags(p)
    p.set_defaults(run=run)
