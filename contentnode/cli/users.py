"""Offline account recovery: `contentnode user create|reset-password|reset-2fa|list`.

The way back for an operator locked out of the only administrator account
(forgotten password, lost authenticator): stop the daemon, run one of these
on its data dir, start it again (cli/context.py takes the data-dir lock). A
password is read from a prompt or standard input, never from a flag, where
`ps` and shell history would show it.
"""

import getpass
import sys

from contentnode import clock
from contentnode.auth import passkeys
from contentnode.auth.passwords import password_problem
from contentnode.auth.scopes import ROLES, SCOPES
from contentnode.auth.users import find_by_username, new_user, new_username, role_and_scopes
from contentnode.cli.context import AGENT, Refused, add_data_dir_flags, runner
from contentnode.core.fields import FieldError


def read_password(username: str, min_length: int, stdin=None) -> str:
    """Twice from a prompt on a terminal; else the first line of standard input."""
    stdin = stdin or sys.stdin
    if stdin.isatty():
        password = getpass.getpass(f"new password for {username}: ")
        if getpass.getpass("the same again: ") != password:
            raise Refused("the two passwords differ")
    else:
        password = stdin.readline().rstrip("\r\n")
    problem = password_problem(password, username, min_length)
    if problem:
        raise Refused(problem)
    return password


def _user(app, username: str) -> dict:
    user = find_by_username(app.store.data["users"], username)
    if user is None:
        raise Refused(f"no user named {username!r}")
    return user


def _audit(app, action: str, username: str, **detail) -> None:
    app.audit.record(action, target=username, detail=dict(detail, offline=True), user_agent=AGENT)


def create(app, args) -> str:
    wanted = {"username": args.username, "role": args.role}
    chosen = [s for s in (args.scopes or "").split(",") if s]
    if chosen:
        wanted["scopes"] = chosen
    try:  # the same record rules as POST /api/users
        username = new_username(wanted)
        _, scopes = role_and_scopes(wanted)
    except FieldError as exc:
        raise Refused(exc.message) from None
    if find_by_username(app.store.data["users"], username):
        raise Refused(f"a user named {username!r} already exists")
    password = read_password(username, app.store.data["policy"]["password_min_length"])
    password_hash = app.hasher.hash(password)
    with app.store.transaction() as doc:
        user = new_user(username, password_hash, args.role, app.clock.now(), scopes)
        doc["users"][user["id"]] = user
    _audit(app, "user.create", username, role=args.role, scopes=scopes)
    return f"created {args.role} {username}"


def reset_password(app, args) -> str:
    user = _user(app, args.username)
    password = read_password(user["username"], app.store.data["policy"]["password_min_length"])
    password_hash = app.hasher.hash(password)
    with app.store.transaction() as doc:
        record = doc["users"][user["id"]]
        record["password_hash"] = password_hash
        record["password_changed_at"] = app.clock.now()
        if args.enable:
            record["disabled"] = False
    ended = app.sessions.end_user_sessions(user["id"])
    _audit(app, "user.password_reset", user["username"], sessions_ended=ended, enabled=args.enable)
    return f"new password set for {user['username']}; {ended} session(s) ended"


def reset_two_factor(app, args) -> str:
    user = _user(app, args.username)
    with app.store.transaction() as doc:
        was = passkeys.clear_second_factors(doc["users"][user["id"]])
    _audit(app, "user.2fa_reset", user["username"], **was)
    return (f"two-factor authentication removed for {user['username']} (TOTP and {was['passkeys_removed']} "
            f"passkey(s)); they may set it up again after login")


def list_users(app, args) -> str:
    lines = [f"{'username':24} {'role':9} {'2fa':4} {'disabled':9} last login"]
    for user in sorted(app.store.data["users"].values(), key=lambda u: u["username"].lower()):
        two_factor = "yes" if (user.get("totp") or {}).get("enabled") or user.get("passkeys") else "no"
        lines.append(f"{user['username']:24} {user['role']:9} {two_factor:4} "
                     f"{'yes' if user.get('disabled') else 'no':9} {clock.rfc3339(user.get('last_login_at')) or '-'}")
    return "\n".join(lines)


def add_parser(sub) -> None:
    user = sub.add_parser("user", help="manage accounts offline (the daemon must be stopped)")
    actions = user.add_subparsers(dest="action", required=True)
    p = actions.add_parser("create", help="create a user; the password is read from a prompt or stdin")
    p.add_argument("username")
    p.add_argument("--role", required=True, choices=tuple(ROLES),
                   help="the account's role, one of %(choices)s (no default: say which)")
    p.add_argument("--scopes", help="comma-separated scopes for --role custom, of: " + ", ".join(SCOPES))
    p.set_defaults(run=runner(create, create_data_dir=True))
    add_data_dir_flags(p)
    p = actions.add_parser("reset-password", help="set a new password (prompt or stdin); ends the user's sessions")
    p.add_argument("username")
    p.add_argument("--enable", action="store_true", help="also re-enable a disabled account")
    p.set_defaults(run=runner(reset_password))
    add_data_dir_flags(p)
    p = actions.add_parser("reset-2fa", help="turn the user's two-factor authentication off")
    p.add_argument("username")
    p.set_defaults(run=runner(reset_two_factor))
    add_data_dir_flags(p)
    p = actions.add_parser("list", help="list the users")
    p.set_defaults(run=runner(list_users))
    add_data_dir_flags(p)
