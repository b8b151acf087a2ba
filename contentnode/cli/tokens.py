"""Offline API tokens: `contentnode token create|list|revoke` on a stopped node.

For provisioning a script before the daemon first runs, or revoking a leaked
token while it is down. The same rules as /api/me/tokens (auth/tokens.py);
no password is asked: whoever may open the data dir already holds every
secret. The secret is printed once, alone on stdout, so `$(...)` captures it.
"""

from contentnode import clock
from contentnode.auth import tokens
from contentnode.auth.policy import ACCOUNT_SECTIONS
from contentnode.auth.scopes import SCOPES
from contentnode.auth.users import find_by_username
from contentnode.cli.context import AGENT, Refused, add_data_dir_flags, runner

SECTIONS = dict(ACCOUNT_SECTIONS, **tokens.SECTIONS)


def _user(ctx, username: str) -> dict:
    user = find_by_username(ctx.store.data["users"], username)
    if user is None:
        raise Refused(f"no user named {username!r}")
    return user


def create(ctx, args) -> str:
    user = _user(ctx, args.user)
    scopes = [s for s in (args.scopes or "").split(",") if s]
    try:
        with ctx.store.transaction() as doc:
            record, secret = tokens.mint(doc, doc["users"][user["id"]], args.name, scopes, args.expires_in,
                                         ctx.clock.now())
    except tokens.TokenError as exc:
        raise Refused(str(exc)) from None
    ctx.audit.record("token.create", target=user["username"], user_agent=AGENT,
                     detail={"id": record["id"], "name": record["name"], "offline": True})
    return secret


def list_tokens(ctx, args) -> str:
    users = ctx.store.data["users"]
    wanted = _user(ctx, args.user)["id"] if args.user else None
    lines = [f"{'id':16} {'user':20} {'name':24} {'expires':20} scopes"]
    for record in sorted(ctx.store.data.get("api_tokens", {}).values(), key=lambda t: t["created_at"]):
        if wanted and record["user_id"] != wanted:
            continue
        owner = users.get(record["user_id"], {}).get("username", "?")
        lines.append(f"{record['id']:16} {owner:20} {record['name']:24} "
                     f"{clock.rfc3339(record['expires_at']) or 'never':20} {','.join(record['scopes'])}")
    return "\n".join(lines)


def revoke(ctx, args) -> str:
    with ctx.store.transaction() as doc:
        record = doc.get("api_tokens", {}).pop(args.id, None)
    if record is None:
        raise Refused(f"no token with id {args.id!r}")
    owner = ctx.store.data["users"].get(record["user_id"], {}).get("username")
    ctx.audit.record("token.revoke", target=owner, user_agent=AGENT,
                     detail={"id": record["id"], "name": record["name"], "offline": True})
    return f"revoked token {record['id']} ({record['name']}); its sessions end at their next request"


def add_parser(sub) -> None:
    token = sub.add_parser("token", help="manage API tokens offline (the daemon must be stopped)")
    actions = token.add_subparsers(dest="action", required=True)
    p = actions.add_parser("create", help="create a token; its secret is printed once on stdout")
    p.add_argument("--user", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--scopes", required=True, help="comma-separated scopes, a subset of the user's, of: " + ", ".join(SCOPES))
    p.add_argument("--expires-in", type=int, help="seconds until it expires (default: never)")
    p.set_defaults(run=runner(create, sections=SECTIONS))
    add_data_dir_flags(p)
    p = actions.add_parser("list", help="list tokens (never their secrets)")
    p.add_argument("--user")
    p.set_defaults(run=runner(list_tokens, sections=SECTIONS))
    add_data_dir_flags(p)
    p = actions.add_parser("revoke", help="delete a token by id")
    p.add_argument("id")
    p.set_defaults(run=runner(revoke, sections=SECTIONS))
    add_data_dir_flags(p)
