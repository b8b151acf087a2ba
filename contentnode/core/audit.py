"""The activity log: append-only JSON lines with a hash chain, rotated by size.

Each entry carries `prev`, the SHA-256 of the previous line's bytes, so an
edited, inserted or deleted line breaks the chain at that point and
`verify_chain` names it. Entries never hold secrets: values under keys that
name a secret are dropped before writing, whatever the caller passed.
"""

import hashlib
import json
import os
import re
import threading
from collections import OrderedDict

from contentnode import clock
from contentnode.fileio import fsync_dir, write_all

GENESIS = "0" * 64
REPEAT_PERIOD = 300.0   # seconds: at most one entry per anonymous key, plus one count entry
MAX_REPEAT_KEYS = 10000
# Member names that hold secrets: passwords and passphrases, secrets and secret keys, tokens,
# hashes, private keys, recovery codes, TOTP material, cookies. "password_min_length" is not one.
SECRET_KEY = re.compile(r"secret|passw(or)?d$|passphrase|token$|(^|_)hash$|key_pem|private_key|recovery|totp|"
                        r"cookie|authorization", re.IGNORECASE)


def scrub(value):
    """Drop members whose name says they hold a secret, at any depth."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def _parse(line: bytes) -> dict | None:
    """The entry of one line, or None when the line is not a whole entry."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and "action" in entry and "time" in entry else None


def _line_hash(line: bytes) -> str:
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


LOG_FILE = "audit.jsonl"


def log_files(path: str, keep: int) -> list:
    """The log file and its rotated predecessors, oldest first."""
    rotated = [f"{path}.{n}" for n in range(keep, 0, -1)]
    return [p for p in rotated + [path] if os.path.exists(p)]


class AuditLog:
    def __init__(self, folder: str, clock, max_bytes: int = 5 << 20, keep: int = 5):
        self.folder = folder
        self.clock = clock
        self.path = os.path.join(folder, LOG_FILE)
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()
        self._repeats: OrderedDict[str, dict] = OrderedDict()  # key -> {"start", "count", "action", "target", "ip"}
        self._last_hash, self._next_id = self._tail()
        self._end_torn_line()

    def files(self) -> list:
        """Log files oldest first."""
        return log_files(self.path, self.keep)

    def _tail(self):
        """(hash of the last line, next id). A line torn by a crash does not stop the daemon:
        the next entry chains to it (so `verify_chain` names it) and ids go on from the
        last readable entry."""
        last_hash = None
        for path in reversed(self.files()):
            with open(path, "rb") as f:
                lines = [line for line in f.read().split(b"\n") if line.strip()]
            for line in reversed(lines):
                last_hash = last_hash or _line_hash(line)
                entry = _parse(line)
                if entry is not None and isinstance(entry.get("id"), int):
                    return last_hash, entry["id"] + 1
        return last_hash or GENESIS, 1

    def _end_torn_line(self) -> None:
        """A crash mid-append can leave a last line without its newline: end it, so the
        next entry starts a line of its own."""
        try:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        except OSError:  # no file yet, or an empty one
            return
        if torn:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                write_all(fd, b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)

    def _rotate(self) -> None:
        for n in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{n}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{n + 1}")
        os.replace(self.path, f"{self.path}.1")
        fsync_dir(self.folder)  # the renames must survive a power loss, or entries would

    def record_repeating(self, key: str, action: str, target=None, ok: bool = False, detail=None,
                         ip: str | None = None, user_agent: str | None = None) -> dict | None:
        """An entry any anonymous client can cause as often as it likes (a locked-out login):
        written once per key and REPEAT_PERIOD; the repeats are only counted, and written
        as one entry with detail.repeats when the period is over, so no request rate
        can rotate real history away. Returns the entry, or None when it was only counted."""
        now = self.clock.now()
        with self._lock:
            slot = self._repeats.get(key)
            if slot is not None and now - slot["start"] < REPEAT_PERIOD:
                slot["count"] += 1
                return None
        self._flush_repeats(now, also=key)
        with self._lock:
            self._repeats[key] = {"start": now, "count": 0, "action": action, "target": target, "ip": ip}
            while len(self._repeats) > MAX_REPEAT_KEYS:
                self._repeats.popitem(last=False)  # the oldest key's count is lost, its first entry is kept
        return self.record(action, target=target, ok=ok, detail=detail, ip=ip, user_agent=user_agent)

    def _flush_repeats(self, now: float, also: str | None = None) -> None:
        """Write the counts of closed periods (and of key `also`, whose new period starts now)."""
        with self._lock:
            closed = [(k, s) for k, s in self._repeats.items() if k == also or now - s["start"] >= REPEAT_PERIOD]
            for key, _ in closed:
                del self._repeats[key]
        for _, slot in closed:
            if not slot["count"]:
                continue
            self.record(slot["action"], target=slot["target"], ok=False, ip=slot["ip"],
                        detail={"repeats": slot["count"], "since": clock.rfc3339(slot["start"])},
                        flush=False)

    def record(self, action: str, target=None, ok: bool = True, detail=None, user=None,
               ip: str | None = None, user_agent: str | None = None, flush: bool = True) -> dict:
        if flush and self._repeats:
            self._flush_repeats(self.clock.now())
        with self._lock:
            entry = {
                "id": self._next_id,
                "time": clock.rfc3339(self.clock.now()),
                "user": user.get("username") if user else None,
                "user_id": user.get("id") if user else None,
                "ip": ip,
                "user_agent": user_agent or None,
                "action": action,
                "target": target,
                "ok": bool(ok),
                "detail": scrub(detail) if detail is not None else None,
                "prev": self._last_hash,
            }
            # "replace": a lone surrogate some client sent (a JSON "\ud800") is written as "?",
            # so the line stays valid UTF-8 JSON and the request is still audited
            line = json.dumps(entry, separators=(",", ":"), ensure_ascii=False).encode(
                "utf-8", "replace") + b"\n"
            if os.path.exists(self.path) and os.path.getsize(self.path) + len(line) > self.max_bytes:
                self._rotate()
            created = not os.path.exists(self.path)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                write_all(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                fsync_dir(self.folder)  # a new file's name is durable only once its folder is synced
            self._last_hash = _line_hash(line)
            self._next_id += 1
            return entry

    def query(self, user=None, action=None, since=None, until=None, limit=100, cursor=None):
        """Entries newest first matching every given filter; (entries, next cursor or None).

        `action` matches exactly or as a prefix ending in "." ("user." matches "user.create");
        `since`/`until` are epoch seconds; `cursor` is the id below which to continue.
        """
        if self._repeats:
            self._flush_repeats(self.clock.now())
        found = []
        for path in reversed(self.files()):
            with open(path, "rb") as f:
                lines = f.readlines()
            for line in reversed(lines):
                entry = _parse(line) if line.strip() else None
                if entry is None:
                    continue  # a line torn by a crash (verify_chain reports it)
                if cursor is not None and entry["id"] >= cursor:
                    continue
                if user is not None and entry.get("user") != user:
                    continue
                if action is not None and not (entry["action"] == action or
                                               (action.endswith(".") and entry["action"].startswith(action))):
                    continue
                when = clock.parse_rfc3339(entry["time"])
                if since is not None and when < since:
                    continue
                if until is not None and when > until:
                    continue
                found.append(entry)
                if len(found) > limit:
                    return found[:limit], found[limit - 1]["id"]
        return found, None


def verify_chain(folder: str, keep: int = 5) -> dict:
    """Walk every kept file oldest first; report the first line whose `prev` is wrong.

    The oldest kept line is the anchor (its predecessor may have been rotated away).
    """
    previous, checked = None, 0
    for path in log_files(os.path.join(folder, LOG_FILE), keep):
        with open(path, "rb") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    prev = entry["prev"]
                except (ValueError, KeyError, TypeError):
                    return {"ok": False, "checked": checked, "file": path, "line": number,
                            "reason": "not a valid audit entry"}
                if previous is not None and prev != previous:
                    return {"ok": False, "checked": checked, "file": path, "line": number,
                            "id": entry.get("id"), "reason": "hash chain broken: this line or the one before was changed"}
                previous = _line_hash(line)
                checked += 1
    return {"ok": True, "checked": checked}
