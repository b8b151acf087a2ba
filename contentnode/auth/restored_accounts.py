"""What a restore does with accounts: it never rolls a credential back.

After a compromise, restoring a backup from before it must not revive what was
revoked since: a token deleted, a password or second factor changed, an
account disabled, demoted or deleted. So, unless the restorer asks for the
backup's credentials as they were (restore_credentials), the accounts a
restore writes are the node's current ones:

- every user the node has now stays, with its current password, two-factor
  state (TOTP and passkeys), tokens, last login and addresses; from the backup it takes only the
  account's access (role and scopes) and `disabled`, and only where they give
  no more than the node grants now (a restore may narrow or disable, never
  widen or re-enable);
- users the backup has and the node no longer has (deleted since) stay gone;
  users made since stay;
- a token lives after the restore only if the node has it now: tokens revoked
  since stay revoked, tokens made since stay.

How the node knows what changed "since": the backup holds the accounts and
tokens that existed then; what the node lacks now was deleted or revoked
since, and a credential that differs was changed since. keep_current()
reports all of it, so the restore's answer can name what was kept.
"""

import copy

from contentnode.auth.scopes import effective_scopes


def no_changes() -> dict:
    """The report of a restore that kept nothing back (restore_credentials, or no difference)."""
    return {"tokens_revoked": [], "tokens_created": [], "users_deleted": [], "users_created": [],
            "users_credentials": []}


def keep_current(restored: dict, current: dict) -> dict:
    """Put the node's current accounts into `restored` (the document a restore will write); the report."""
    report = no_changes()
    backup_users = restored.get("users") or {}
    backup_tokens = restored.get("api_tokens") or {}
    users = {}
    for user_id, now in (current.get("users") or {}).items():
        then = backup_users.get(user_id)
        if then is None:
            users[user_id] = copy.deepcopy(now)
            report["users_created"].append(now["username"])
            continue
        users[user_id], kept = _merged_user(then, now)
        if kept:
            report["users_credentials"].append({"user": now["username"], "kept": kept})
    report["users_deleted"] = [u["username"] for uid, u in backup_users.items() if uid not in users]
    tokens = copy.deepcopy(current.get("api_tokens") or {})
    report["tokens_revoked"] = [_token_ref(t, backup_users) for tid, t in backup_tokens.items() if tid not in tokens]
    report["tokens_created"] = [_token_ref(t, users) for tid, t in tokens.items() if tid not in backup_tokens]
    restored["users"], restored["api_tokens"] = users, tokens
    return report


def _merged_user(then: dict, now: dict) -> tuple[dict, list]:
    """The node's record with the backup's access where it grants no more; which credentials were kept."""
    merged = copy.deepcopy(now)
    kept = []
    if then.get("password_hash") != now.get("password_hash"):
        kept.append("password")
    if _second_factor(then) != _second_factor(now):
        kept.append("two_factor")
    if now.get("disabled") and not then.get("disabled"):
        kept.append("disabled")
    merged["disabled"] = bool(now.get("disabled") or then.get("disabled"))
    granted_then = set(effective_scopes(then.get("role", ""), then.get("scopes") or ()))
    granted_now = set(effective_scopes(now.get("role", ""), now.get("scopes") or ()))
    if granted_then <= granted_now:
        merged["role"], merged["scopes"] = then.get("role"), copy.deepcopy(then.get("scopes"))
        if merged["scopes"] is None:
            merged.pop("scopes")
    else:
        kept.append("role")
    return merged, kept


def _second_factor(user: dict) -> tuple:
    """What opens the account's second step: on or off, the secret, the unused recovery codes, the
    passkeys (a backup's older sign counter would also roll back the clone check)."""
    totp = user.get("totp") or {}
    keys = sorted((p["credential_id"], p["sign_count"]) for p in user.get("passkeys") or ())
    return bool(totp.get("enabled")), totp.get("secret"), sorted(totp.get("recovery") or ()), keys


def _token_ref(token: dict, users: dict) -> dict:
    """A token named without its hash: id, name and its owner's username."""
    owner = users.get(token.get("user_id")) or {}
    return {"id": token.get("id"), "name": token.get("name"), "user": owner.get("username")}
