"""The records of a backup, checked before a restore swaps them in.

A restore must leave a node that works, or change nothing: a record of the
wrong shape (a domain that is a string, a rule without its prefix, a user
without a role) would otherwise be written durably and then fail every
request that reads it, the public content path included, until someone
edited the state file by hand. Each section is checked with the same rules
its API applies; the first problem refuses the whole restore (BackupError).
restore_into is the one restore both POST /api/backup/restore and the offline
`contentnode backup restore` run: it also keeps the node's current credentials
(auth/restored_accounts.py) and secrets (auth/restored_secrets.py) unless
asked for the backup's, and ends every session but the restorer's.

It sits above core and auth, beside schema.py (which declares the sections):
checking a whole state document takes the record rules of both, the accounts'
from auth and the rest from core, and core may import nothing of auth.
"""

import ipaddress
import json
import os
import re
import threading

from contentnode.auth import passkeys, restored_accounts, restored_secrets, tokens
from contentnode.auth.policy import DEFAULT_POLICY, checked_policy
from contentnode.auth.scopes import ROLES, invalid_scopes
from contentnode.auth.users import USERNAME_PATTERN
from contentnode.clock import parse_rfc3339
from contentnode.core import buckets, domains, notify, revisions, rules
from contentnode.core import settings as st
from contentnode.core import backup, webauthn
from contentnode.core.backup import BackupError
from contentnode.core.folders import FolderRoots
from contentnode.core.fields import TIME_MAX, TIME_MIN, FieldError, is_time
from contentnode.schema import REVISIONED
from contentnode.tls import HTTPS_DEFAULTS

_HEX = re.compile(r"[0-9a-f]+")
_RECOVERY_HASH = re.compile(r"[0-9a-f]{64}")  # totp.hash_recovery_code: SHA-256 hex
_PASSKEY_MEMBERS = {"id", "name", "credential_id", "public_key", "algorithm", "sign_count", "backup_eligible",
                    "backup_state", "aaguid", "transports", "created_at", "last_used_at"}
_restore_lock = threading.Lock()  # one restore at a time within this process


class _Bad(Exception):
    """One problem in one section; turned into a BackupError naming both."""


def _require(condition, message):
    if not condition:
        raise _Bad(message)


def _time_text(value, what, optional=True):
    if value is None and optional:
        return
    _require(isinstance(value, str), f"{what} must be an RFC 3339 time")
    try:
        _require(TIME_MIN <= parse_rfc3339(value) <= TIME_MAX, f"{what} must lie between 2000 and 9999")
    except (ValueError, OverflowError):
        raise _Bad(f"{what} must be an RFC 3339 time") from None


def _time(value, what, optional=True):
    _require((value is None and optional) or is_time(value), f"{what} must be a time between 2000 and 9999")


def _totp(totp, name):
    """The two-factor state as twofactor.py writes it: typed step, secret, recovery hashes."""
    _require(isinstance(totp, dict) and set(totp) <= {"enabled", "secret", "pending_secret", "last_step",
                                                      "recovery", "enabled_at"},
             f"user {name!r}: bad two-factor state")
    _require(isinstance(totp.get("enabled", False), bool), f"user {name!r}: totp.enabled must be true or false")
    for key in ("secret", "pending_secret"):
        _require(totp.get(key) is None or (isinstance(totp[key], str) and re.fullmatch(r"[A-Z2-7]{16,128}", totp[key])),
                 f"user {name!r}: totp.{key} must be a base32 secret")
    step = totp.get("last_step")
    _require(step is None or (type(step) is int and 0 <= step <= TIME_MAX // 30 + 1),
             f"user {name!r}: totp.last_step must be a whole number of 30-second steps")
    recovery = totp.get("recovery", [])
    _require(isinstance(recovery, list) and len(recovery) <= 100
             and all(isinstance(h, str) and _RECOVERY_HASH.fullmatch(h) for h in recovery),
             f"user {name!r}: totp.recovery must be a list of SHA-256 hex hashes")
    _time(totp.get("enabled_at"), f"user {name!r}: totp.enabled_at")
    if totp.get("enabled"):
        _require(totp.get("secret") is not None, f"user {name!r}: two-factor is on without its secret")


def _passkeys(records, name, seen: set):
    """Passkeys as api/passkeys.py writes them: ids, a COSE key the node can verify with, counter, flags."""
    _require(isinstance(records, list) and len(records) <= passkeys.MAX_PASSKEYS,
             f"user {name!r}: passkeys must be a list of at most {passkeys.MAX_PASSKEYS}")
    for record in records:
        _require(isinstance(record, dict) and set(record) == _PASSKEY_MEMBERS, f"user {name!r}: bad passkey record")
        what = f"user {name!r}: passkey {str(record['id'])[:20]!r}"
        _require(isinstance(record["id"], str) and _HEX.fullmatch(record["id"]), f"{what}: bad id")
        _require(isinstance(record["name"], str) and 1 <= len(record["name"]) <= 64, f"{what}: bad name")
        try:
            raw_id = webauthn.from_b64url(record["credential_id"], "credential_id")
            algorithm = webauthn.algorithm_of(webauthn.from_b64url(record["public_key"], "public_key"))
        except webauthn.WebAuthnError as exc:
            raise _Bad(f"{what}: {exc}") from None
        _require(1 <= len(raw_id) <= webauthn.MAX_CREDENTIAL_ID and algorithm == record["algorithm"],
                 f"{what}: the credential id or algorithm does not fit its key")
        _require(raw_id not in seen, f"{what}: the credential is registered twice")
        seen.add(raw_id)
        _require(type(record["sign_count"]) is int and 0 <= record["sign_count"] < 2 ** 32, f"{what}: bad sign_count")
        _require(all(isinstance(record[k], bool) for k in ("backup_eligible", "backup_state")),
                 f"{what}: backup flags must be true or false")
        _require(isinstance(record["aaguid"], str) and re.fullmatch(r"[0-9a-f]{32}", record["aaguid"]),
                 f"{what}: bad aaguid")
        _require(isinstance(record["transports"], list) and len(record["transports"]) <= 8
                 and all(isinstance(t, str) and len(t) <= 32 for t in record["transports"]), f"{what}: bad transports")
        _time(record["created_at"], f"{what}: created_at", optional=False)
        _time(record["last_used_at"], f"{what}: last_used_at")


def _records(section, what):
    """(key, record) pairs of a section holding one object per key."""
    for key, record in section.items():
        _require(isinstance(record, dict), f"{what} {key!r} is not an object")
        yield key, record


def _node(section):
    _require(isinstance(section.get("id"), str) and section["id"], "node.id is missing")
    secret = section.get("secret")
    _require(isinstance(secret, str) and len(secret) >= 32 and len(secret) % 2 == 0 and _HEX.fullmatch(secret),
             "node.secret must be a hex secret")


def _users(section):
    names, credentials = set(), set()
    for user_id, user in _records(section, "user"):
        _require(user.get("id") == user_id, f"user {user_id!r} has another id inside")
        name = user.get("username")
        _require(isinstance(name, str) and re.fullmatch(USERNAME_PATTERN, name), f"user {user_id!r}: bad username")
        _require(name.lower() not in names, f"username {name!r} appears twice")
        names.add(name.lower())
        _require(user.get("role") in ROLES, f"user {name!r}: unknown role")
        scopes = user.get("scopes") or []
        _require(isinstance(scopes, list) and all(isinstance(s, str) for s in scopes) and not invalid_scopes(scopes),
                 f"user {name!r}: bad scopes")
        _require(isinstance(user.get("password_hash"), str) and user["password_hash"], f"user {name!r}: no password hash")
        _require(isinstance(user.get("disabled", False), bool), f"user {name!r}: disabled must be true or false")
        _totp(user.get("totp") or {}, name)
        _passkeys(user.get("passkeys") or [], name, credentials)
        for stamp in ("created_at", "last_login_at", "password_changed_at"):
            _time(user.get(stamp), f"user {name!r}: {stamp}")
        addresses = user.get("known_addresses") or []
        _require(isinstance(addresses, list) and all(isinstance(a, str) for a in addresses),
                 f"user {name!r}: bad known_addresses")
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise _Bad(f"user {name!r}: {address!r} is not an address") from None
    _require(any(u["role"] == "admin" and not u.get("disabled") for u in section.values()),
             "no enabled administrator (the node would offer first-time setup to anyone)")


def _policy(section):
    try:
        checked_policy(section, DEFAULT_POLICY)
    except FieldError as exc:
        raise _Bad(f"policy: {exc.message}") from None


def _settings(section):
    general = {k: v for k, v in section.items() if k in st.GENERAL_DEFAULTS}
    rest = {k: v for k, v in section.items() if k not in st.GENERAL_DEFAULTS}
    try:
        st.validate(general)
        unknown = sorted(set(rest) - {"admin_host", "admin_allow", "updates"})
        _require(not unknown, f"unknown setting {unknown[0]!r}" if unknown else "")
        if rest.get("admin_host") is not None:
            st.hostname("admin_host", rest["admin_host"])
        st.cidr_list("admin_allow", rest.get("admin_allow", []))
        st.validate_updates(rest.get("updates", {}))
    except FieldError as exc:
        raise _Bad(str(exc)) from None


def _notifications(section):
    try:
        notify.merge(notify.effective({}), section)
    except FieldError as exc:
        raise _Bad(str(exc)) from None


def _domains(section):
    for host, record in _records(section, "domain"):
        try:
            domains.DOMAIN.check_stored(record)
        except FieldError as exc:
            raise _Bad(f"domain {host!r}: {exc.message}") from None
        _require(record["host"] == host, f"domain {host!r}: its record names another host")


def _buckets(section, folder_roots):
    """Buckets by the API's rules; a folder bucket's path must lie in this node's folder_roots."""
    for bucket_id, record in _records(section, "bucket"):
        _require(record.get("id") == bucket_id, f"bucket {bucket_id!r} has another id inside")
        try:
            buckets.BUCKET.check_stored(record)
            if record["type"] == "folder":
                _require(folder_roots is not None, f"bucket {bucket_id}: folder buckets are not available here")
                _require(folder_roots.check_path(record["path"]) == record["path"], f"bucket {bucket_id}: bad path")
        except FieldError as exc:
            raise _Bad(f"bucket {bucket_id}: {exc.message}") from None
    clash = buckets.BUCKET.first_clash(section)
    _require(clash is None, f"bucket {clash and clash[0]}: its name is taken by bucket {clash and clash[1]}")


def _rules(section, doc):
    for rule_id, record in _records(section, "rule"):
        _require(record.get("id", rule_id) == rule_id, f"rule {rule_id!r} has another id inside")
        _require(record.get("domain") in doc["domains"], f"rule {rule_id}: its domain is not in the backup")
        _require(record.get("bucket") in doc["buckets"], f"rule {rule_id}: its bucket is not in the backup")
        try:
            rules.RULE.check_stored(record)
        except FieldError as exc:
            raise _Bad(f"rule {rule_id}: {exc}") from None
    clash = rules.RULE.first_clash(section)
    _require(clash is None, f"rule {clash and clash[0]}: its path is routed twice")


def _links(section):
    keys = section.get("keys", {})
    _require(isinstance(keys, dict), "links.keys must be an object")
    for kid, record in _records(keys, "link key"):
        _require(isinstance(record.get("secret"), str) and record["secret"], f"link key {kid}: no secret")
        _time(record.get("created_at"), f"link key {kid}: created_at", optional=False)
        _time(record.get("retires_at"), f"link key {kid}: retires_at")
    _require(section.get("current") is None or section["current"] in keys, "links.current names no key")


def _https(section):
    _require(set(section) <= set(HTTPS_DEFAULTS), "unknown https key")
    for name, default in HTTPS_DEFAULTS.items():
        value = section.get(name, default)
        _require(type(value) is type(default), f"https.{name} has the wrong type")
    _require(0 <= section.get("port", 443) <= 65535, "https.port is out of range")


def _update_status(section):
    _time_text(section.get("checked_at"), "update_status.checked_at")


CHECKS = (
    ("node", _node), ("users", _users), ("policy", _policy), ("settings", _settings),
    ("notifications", _notifications), ("domains", _domains), ("buckets", None),
    ("rules", None), ("links", _links), ("https", _https), ("update_status", _update_status),
)


def _revisions(doc):
    """Revisions a backup carries are whole numbers from 1 up (the store raises them past the
    node's own where a restored object differs; a record without one counts as revision 1)."""
    for name in sorted(REVISIONED.records):
        for key, record in (doc.get(name) or {}).items():
            if isinstance(record, dict) and "revision" in record:
                _require(revisions.valid(record["revision"]),
                         f"{name} {key!r}: revision must be a whole number from 1 up")
    for name, value in (doc.get("revisions") or {}).items():
        _require((name in REVISIONED.named or name == revisions.COUNTER) and revisions.valid(value),
                 f"revisions.{name} must be the whole-number revision of {', '.join(sorted(REVISIONED.named))}, "
                 f"or the node's {revisions.COUNTER}")


BACKUP_SUBJECT = "the backup's {} cannot be restored"


def check_records(doc: dict, folder_roots: FolderRoots | None = None, subject: str = BACKUP_SUBJECT) -> None:
    """BackupError naming the first record of `doc` (a whole state document) that cannot work
    on a node whose folder buckets may serve from `folder_roots`; `subject` names what is
    checked ({} the section), for a fleet's configuration as for a backup."""
    try:
        json.dumps(doc, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        raise BackupError("the backup holds text that is not valid Unicode, or a number that is not finite") from None
    for name, check in CHECKS:
        if name not in doc:
            continue
        try:
            if name == "buckets":
                _buckets(doc[name], folder_roots)
            elif check is None:
                _rules(doc[name], doc)
            else:
                check(doc[name])
        except _Bad as exc:
            raise BackupError(f"{subject.format(name)}: {exc}") from None
    try:
        _revisions(doc)
    except _Bad as exc:
        raise BackupError(f"{subject.format('revisions')}: {exc}") from None
    try:
        tokens.validate_records(doc.get("api_tokens", {}), set(doc.get("users") or {}))
    except ValueError as exc:
        raise BackupError(f"{subject.format('api_tokens')}: {exc}") from None


def restore_into(ctx, document, passphrase, by, ip=None, keep_session=None, restore_credentials=False,
                 source=None):
    """Validate, keep the current state as a file, swap, end the other sessions, audit.

    BackupError when refused. `ctx` is the admin handlers' context (api/context.py)
    or the offline command's (cli/context.py): store, data_dir, config, clock,
    audit, sessions. Unless restore_credentials, the accounts and secrets written
    are the node's current ones (restored_accounts and restored_secrets keep_current);
    the answer's "kept" names what the backup would have rolled back. Every
    session but keep_session (the restorer's) ends: the accounts, roles and
    secrets behind them may all have changed. `source`, a stored backup's key
    in the schedule's bucket, goes into the answer and audit as from_bucket.
    """
    with _restore_lock:
        opened = backup.open_backup(document, passphrase, ctx.store.data, ctx.store.section_defaults())
        roots = FolderRoots(ctx.config.folder_roots, ctx.data_dir)
        if restore_credentials and opened.kind == "plain":
            raise BackupError("a plain backup carries no credentials to restore (no password hash, second "
                              "factor or token); restore an encrypted backup", "restore_credentials")
        check_records(opened.doc, roots)

        def settle(current: dict) -> dict:
            """What the restore keeps of the node's current state (under the store's lock)."""
            if restore_credentials:
                return dict(restored_accounts.no_changes(), **restored_secrets.no_changes())
            kept = dict(restored_accounts.keep_current(opened.doc, current),
                        **restored_secrets.keep_current(opened.doc, opened.files, current,
                                                        backup.read_files(ctx.data_dir)))
            _check_kept(opened.doc, kept, roots)
            return kept

        saved, kept = backup.apply_restore(ctx.store, ctx.data_dir, opened, ctx.clock.now(), settle)
        ended = ctx.sessions.delete_where(lambda session: session["id"] != keep_session)
    detail = {"kind": opened.kind, "created_at": opened.created_at, "pre_restore": os.path.basename(saved),
              "restore_credentials": bool(restore_credentials), "kept": kept, "sessions_ended": ended}
    if source is not None:
        detail["from_bucket"] = source
    ctx.audit.record("backup.restore", detail=detail, user=by, ip=ip)
    return detail


def _check_kept(doc: dict, kept: dict, roots: FolderRoots) -> None:
    """The records again, with the node's accounts in: a node without one of the backup's
    administrators (a fresh node) is told how to bring the backup's accounts along."""
    try:
        check_records(doc, roots)
    except BackupError as exc:
        if kept["users_deleted"]:
            raise BackupError(f"{exc}; the backup's accounts this node does not have ("
                              f"{', '.join(kept['users_deleted'][:5])}) were left out, as a restore never revives "
                              "credentials: restore with restore_credentials (offline: --restore-credentials) "
                              "to bring them as they were") from None
        raise
