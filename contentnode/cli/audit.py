"""`contentnode audit verify`: check the activity log's hash chain offline."""

from contentnode.cli.context import Refused, add_data_dir_flags, runner
from contentnode.core.audit import verify_chain


def verify(ctx, args) -> str:
    result = verify_chain(ctx.data_dir)
    if not result["ok"]:
        raise Refused(f"audit log broken at {result['file']} line {result['line']}: {result['reason']} "
                      f"({result['checked']} entries before it are intact)")
    return f"audit log intact: {result['checked']} entries checked"


def add_parser(sub) -> None:
    audit = sub.add_parser("audit", help="check the activity log")
    actions = audit.add_subparsers(dest="action", required=True)
    p = actions.add_parser("verify", help="check the hash chain; names the first broken line")
    p.set_defaults(run=runner(verify))
    add_data_dir_flags(p)
