"""Backups of the node: a plain export for review (no secret in it) and an
encrypted export of the complete node (state document and certificate files,
scrypt + AES-256-GCM). A restore is validated whole - format, version,
passphrase, every section and file - before anything is touched.

A plain export records the places it left a secret out (`secrets_omitted`),
so restoring it can put the node's own secret back at each place, and refuse
when the node has none there (a bucket this node never had, say) instead of
restoring a record that cannot work.
"""

import base64
import binascii
import copy
import json
import os
import re
import zlib

from contentnode import clock
from contentnode.core import migrations
from contentnode.core import settings
from contentnode.core.audit import SECRET_KEY
from contentnode.core.text import json_loads
from contentnode.fileio import atomic_write, ensure_private_dir

FORMAT = "contentnode-backup"
VERSION = 1
FILE_FOLDERS = ("certs",)          # data-dir folders whose files belong to a complete backup
# A plain restore keeps these of the node's own: its users, its identity and
# verification secret, its link signing keys and its users' API tokens (all
# secret, or tied to secrets: a plain export leaves the token hashes out).
KEEP_ON_PLAIN_RESTORE = {"users", "node", "links", "api_tokens"}
# In no backup, and every restore keeps the node's current ones: its own backup schedule (its
# passphrase and bucket credentials) and run status (core/backup_schedule.py says why), and its
# fleet membership (role, seq, pinned key chain, purge history), which belongs with the key
# files in <data dir>/fleet/ that no backup carries: a restored membership would roll a
# replica's seq back or make a primary without keys.
NODE_LOCAL = ("backup_schedule", "backup_status", "fleet", "fleet_purges")
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1
MAX_SCRYPT_N = 1 << 17             # 128 MiB of scrypt memory at most, even for a crafted file
KEEP_PRE_RESTORE = 5
_FILE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,250}$")


class BackupError(ValueError):
    """A backup that cannot be restored, or a bad passphrase; `field` names the input."""

    def __init__(self, message, field="backup"):
        super().__init__(message)
        self.field = field


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def check_passphrase(passphrase):
    if not isinstance(passphrase, str) or not 8 <= len(passphrase) <= 1024:
        raise BackupError("passphrase must be a string of 8 to 1024 characters", "passphrase")
    try:
        passphrase.encode("utf-8")
    except UnicodeEncodeError:
        raise BackupError("passphrase holds an unpaired surrogate (not valid Unicode text)", "passphrase") from None
    return passphrase


def _scrub(value, path, omitted):
    """Copy of value without secret members; their paths go to `omitted`."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if SECRET_KEY.search(str(key)) and item not in (None, "", [], {}):
                omitted.append(path + [key])
            else:
                out[key] = _scrub(item, path + [key], omitted)
        return out
    if isinstance(value, list):
        return [_scrub(item, path + [i], omitted) for i, item in enumerate(value)]
    return value


def _header(kind, doc, node_name, now):
    return {"format": FORMAT, "version": VERSION, "kind": kind, "schema": doc.get("schema"),
            "node": node_name, "created_at": clock.rfc3339(now)}


def _exported_sections(doc):
    return {k: v for k, v in doc.items() if k != "schema" and k not in NODE_LOCAL}


def make_export(doc, data_dir, passphrase, now):
    """The backup document of a node: encrypted and complete with a passphrase, else plain."""
    name = settings.effective(doc)["node_name"]
    if passphrase is None:
        return export_plain(doc, name, now)
    return export_encrypted(doc, read_files(data_dir), passphrase, name, now)


def export_plain(doc, node_name, now):
    """The configuration with every secret left out."""
    omitted = []
    data = _scrub(_exported_sections(doc), [], omitted)
    return dict(_header("plain", doc, node_name, now), data=data, secrets_omitted=omitted)


def _kdf(salt, n, r, p):
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p)


def _aad(header):
    return json.dumps(header, sort_keys=True, separators=(",", ":")).encode()


def export_encrypted(doc, files, passphrase, node_name, now):
    """The complete node, encrypted under the passphrase; metadata is authenticated too."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    check_passphrase(passphrase)
    header = _header("encrypted", doc, node_name, now)
    salt, nonce = os.urandom(16), os.urandom(12)
    header["kdf"] = {"name": "scrypt", "salt": _b64(salt), "n": SCRYPT_N, "r": SCRYPT_R, "p": SCRYPT_P}
    header["cipher"] = {"name": "aes-256-gcm", "nonce": _b64(nonce)}
    key = _kdf(salt, SCRYPT_N, SCRYPT_R, SCRYPT_P).derive(passphrase.encode())
    plain = json.dumps({"data": _exported_sections(doc), "files": files}, separators=(",", ":")).encode()
    sealed = AESGCM(key).encrypt(nonce, zlib.compress(plain, 6), _aad(header))
    return dict(header, ciphertext=_b64(sealed))


def read_files(data_dir):
    """{"certs/<name>": text} for every file a complete backup carries."""
    files = {}
    for folder in FILE_FOLDERS:
        path = os.path.join(data_dir, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if _FILE_NAME.match(name) and os.path.isfile(full):
                with open(full, encoding="utf-8") as f:
                    files[f"{folder}/{name}"] = f.read()
    return files


class Opened:
    """A validated backup: kind, the document it restores to, and its files (encrypted only)."""

    def __init__(self, kind, doc, files, created_at):
        self.kind, self.doc, self.files, self.created_at = kind, doc, files, created_at


def open_backup(backup, passphrase, current, sections):
    """Validate (and decrypt) a backup and build the document a restore would write."""
    if not isinstance(backup, dict) or backup.get("format") != FORMAT:
        raise BackupError("this is not a contentnode backup")
    version, schema = backup.get("version"), backup.get("schema")
    if not isinstance(version, int) or not isinstance(schema, int):
        raise BackupError("the backup has no version")
    if version > VERSION or schema > migrations.SCHEMA_VERSION:
        raise BackupError(f"the backup was made by a newer contentnode (backup format {version}, "
                          f"schema {schema}); this one reads up to {VERSION}/{migrations.SCHEMA_VERSION}")
    kind = backup.get("kind")
    if kind == "encrypted":
        data, files = _decrypt(backup, passphrase)
        doc = _check_document(data, schema, sections)
        _check_files(files)
    elif kind == "plain":
        if passphrase is not None:
            raise BackupError("a plain backup takes no passphrase", "passphrase")
        doc = _plain_restore(current, _check_document(backup.get("data"), schema, sections),
                             backup.get("secrets_omitted"))
        files = None
    else:
        raise BackupError("the backup's kind must be plain or encrypted")
    for name in NODE_LOCAL:
        if name in current:
            doc[name] = copy.deepcopy(current[name])
    return Opened(kind, doc, files, backup.get("created_at"))


def _decrypt(backup, passphrase):
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    if passphrase is None:
        raise BackupError("this backup is encrypted: a passphrase is required", "passphrase")
    check_passphrase(passphrase)
    header = {k: v for k, v in backup.items() if k != "ciphertext"}
    kdf, cipher = header.get("kdf"), header.get("cipher")
    try:
        n, r, p = kdf["n"], kdf["r"], kdf["p"]
        if kdf["name"] != "scrypt" or cipher["name"] != "aes-256-gcm":
            raise BackupError("unsupported key derivation or cipher")
        if not (isinstance(n, int) and 2 <= n <= MAX_SCRYPT_N and n & (n - 1) == 0
                and r in range(1, 17) and p in range(1, 5)):
            raise BackupError("the backup's scrypt parameters are out of range")
        salt = base64.b64decode(kdf["salt"], validate=True)
        nonce = base64.b64decode(cipher["nonce"], validate=True)
        sealed = base64.b64decode(backup["ciphertext"], validate=True)
    except (KeyError, TypeError, binascii.Error):
        raise BackupError("the backup's encryption fields are missing or malformed") from None
    try:
        key = _kdf(salt, n, r, p).derive(passphrase.encode())
        packed = AESGCM(key).decrypt(nonce, sealed, _aad(header))
    except (InvalidTag, ValueError):
        raise BackupError("wrong passphrase, or the backup was altered", "passphrase") from None
    try:
        content = json_loads(zlib.decompress(packed))
        return content["data"], content["files"]
    except (zlib.error, ValueError, KeyError, TypeError):
        raise BackupError("the backup's content is damaged") from None


def _check_document(data, schema, sections):
    """The backup's sections as a full state document of this version, or BackupError.

    `sections` is {name: default value} of the store's schema (Store.section_defaults()).
    """
    if not isinstance(data, dict):
        raise BackupError("the backup holds no data")
    doc = copy.deepcopy({k: v for k, v in data.items() if k not in NODE_LOCAL})
    doc["schema"] = schema
    try:
        doc = migrations.migrate(doc, "backup")
    except (migrations.StoreError, KeyError, TypeError, ValueError) as exc:
        raise BackupError(f"the backup cannot be migrated: {exc}") from None
    for name, default in sections.items():
        doc.setdefault(name, default)
        if type(doc[name]) is not type(default):
            raise BackupError(f"section {name!r} of the backup has the wrong type")
    return doc


def _check_files(files):
    if not isinstance(files, dict):
        raise BackupError("the backup's file list is damaged")
    for path, text in files.items():
        folder, _, name = str(path).partition("/")
        if folder not in FILE_FOLDERS or not _FILE_NAME.match(name) or not isinstance(text, str):
            raise BackupError(f"the backup holds an unexpected file {path!r}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise BackupError(f"the backup's file {path!r} is not valid Unicode text") from None


def _lookup(doc, path):
    for key in path:
        if isinstance(doc, dict) and key in doc:
            doc = doc[key]
        elif isinstance(doc, list) and isinstance(key, int) and 0 <= key < len(doc):
            doc = doc[key]
        else:
            raise KeyError(key)
    return doc


def _plain_restore(current, doc, omitted):
    """The backup's configuration with this node's users and secrets put back."""
    if not isinstance(omitted, list) or not all(isinstance(p, list) and p for p in omitted):
        raise BackupError("the backup's secrets_omitted list is damaged")
    for name in KEEP_ON_PLAIN_RESTORE:
        if name in current:
            doc[name] = copy.deepcopy(current[name])
    missing = []
    for path in omitted:
        if path[0] in KEEP_ON_PLAIN_RESTORE or path[0] in NODE_LOCAL:
            continue
        try:
            parent = _lookup(doc, path[:-1])
            parent[path[-1]] = copy.deepcopy(_lookup(current, path))
        except (KeyError, TypeError, IndexError):
            missing.append("/".join(str(p) for p in path))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise BackupError(f"the backup needs secrets this node does not have ({shown}); "
                          "restore an encrypted backup to bring them along")
    return doc


def save_pre_restore(data_dir, current, files, now):
    """Keep the state before a restore (0600, secrets inside), newest few only.

    Names are pre-restore-<second>-<sequence>.json: two restores in one second
    keep both snapshots, and names still sort oldest first.
    """
    stamp = clock.rfc3339(now).replace(":", "").replace("-", "")
    taken = set(os.listdir(data_dir))
    sequence = 1
    while f"pre-restore-{stamp}-{sequence:03d}.json" in taken:
        sequence += 1
    path = os.path.join(data_dir, f"pre-restore-{stamp}-{sequence:03d}.json")
    body = json.dumps({"format": "contentnode-pre-restore", "state": current, "files": files})
    atomic_write(path, body.encode())
    old = sorted(n for n in os.listdir(data_dir) if n.startswith("pre-restore-") and n.endswith(".json"))
    for name in old[:-KEEP_PRE_RESTORE]:
        os.unlink(os.path.join(data_dir, name))
    return path


def write_files(data_dir, files):
    """Make the backed-up folders hold exactly the backup's files."""
    for folder in FILE_FOLDERS:
        path = os.path.join(data_dir, folder)
        ensure_private_dir(path)
        wanted = {p.split("/", 1)[1] for p in files if p.startswith(folder + "/")}
        for name in os.listdir(path):
            if _FILE_NAME.match(name) and name not in wanted and os.path.isfile(os.path.join(path, name)):
                os.unlink(os.path.join(path, name))
    for rel, text in files.items():
        atomic_write(os.path.join(data_dir, rel), text.encode("utf-8"))


def apply_restore(store_, data_dir, opened, now, settle):
    """Keep the current state as a file, then swap in the backup; returns (that file's path,
    what `settle` returned).

    All of it runs under the store's lock: `settle(current)` first adjusts `opened` to the node's
    current state (what a restore keeps), which no other writer can change until the swap, so
    a key rotated meanwhile is never overwritten by an older read. The pre-restore copy is
    written next, so the node can always be put back. An exception changes nothing.
    """
    with store_.transaction() as doc:
        current = json.loads(json.dumps(store_.data))
        settled = settle(current)
        path = save_pre_restore(data_dir, current, read_files(data_dir), now)
        if opened.files is not None:
            write_files(data_dir, opened.files)
        doc.clear()
        doc.update(copy.deepcopy(opened.doc))
    return path, settled
