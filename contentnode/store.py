"""The state store: one JSON document with durable, atomic transactions.

Readers take `store.data`, a snapshot they must not mutate. Writers use
`with store.transaction() as doc:` on a private copy; on a clean exit the copy
is written durably (fileio.atomic_write) and only then becomes the new
snapshot. An exception inside the block, or a failed write, leaves memory and
disk as they were. Append-heavy data (audit, traffic, cache) lives elsewhere.

Commit listeners (add_commit_listener) hear, after each durable commit, the
names of the sections it changed: how a service follows edits without any
handler knowing it (the fleet publishes the shared sections this way).

A store given `revisioned=` (a Revisioned) stamps the revisions of the
updatable objects as it commits (see core/revisions.py): one write path, so
no caller can change an object and forget its revision.
"""

import json
import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from contentnode.core import revisions
from contentnode.core.migrations import SCHEMA_VERSION, StoreError, migrate
from contentnode.fileio import atomic_write

log = logging.getLogger("contentnode.store")

STATE_FILE = "state.json"
CHANGES_FILE = "state.changes"   # the stamp of the last state file written, mapped by every process
_STAMP = struct.Struct("<QQ")    # inode, mtime in ns
DATA_DIR_MARKER = ".contentnode-data-dir"  # written when the node claims its data dir


class DataDirRefused(Exception):
    """The data dir path holds something that is not this node's; start-up stops with exit code 2."""


def claim_data_dir(path: str) -> None:
    """Make `path` the node's private (0700) data dir, never taking over someone else's folder.

    A folder is the node's when the node creates it, when it is empty (systemd's
    StateDirectory, a `mkdir` by the operator), or when it already holds
    state.json or the marker file. Anything else (run from / with the default,
    a typo naming /var or a home folder) keeps its mode and contents.
    """
    missing, existing = [], os.path.abspath(path)
    while not os.path.lexists(existing):
        missing.append(existing)
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise DataDirRefused(f"the data dir {path} cannot be made: {existing} is a file, not a folder; "
                             "choose another with --data-dir (or data_dir in the config)")
    if not missing:
        names = set(os.listdir(path))
        if names and not names & {STATE_FILE, DATA_DIR_MARKER}:
            raise DataDirRefused(
                f"the data dir {path} already holds {len(names)} item(s) that are not contentnode's "
                f"(no {STATE_FILE}); refusing to take it over, nothing changed. Choose a new or empty folder "
                "with --data-dir (or data_dir in the config)")
    for folder in reversed(missing):  # parents too are made 0700 (os.makedirs would give the umask's 0755)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
    os.chmod(path, 0o700)
    marker = os.path.join(path, DATA_DIR_MARKER)
    if not os.path.exists(marker):
        atomic_write(marker, b"contentnode data dir: state, keys, certificates, cache, logs\n")


@dataclass(frozen=True)
class Revisioned:
    """Which sections carry revisions: each record of `records` is one object with its own
    "revision"; each of `whole` is one object whose revision lives in the "revisions" section.
    Each of `views` ({name: (sections, project)}) is a revision over several sections, in the
    "revisions" section too: it moves when a commit adds or deletes a record of those sections or
    changes project(section, record) of one (the config revision, core/config_doc.py: what `project`
    leaves out, a check's outcome, moves it not). Only the records a commit touched are projected."""

    records: frozenset
    whole: frozenset
    views: Mapping = field(default_factory=dict)

    @property
    def named(self) -> frozenset:
        """The revisions kept by name in the "revisions" section (besides the counter)."""
        return self.whole | frozenset(self.views)


def _own(value) -> int:
    """A revision brought along by a write (a restore's), 0 when it is none."""
    return value if revisions.valid(value) else 0


def _changed_record(record: dict, old) -> bool:
    """Whether a record leaves a transaction new or with other content than the snapshot's.

    An unchanged one is given back the snapshot's revision (load fills it in), so a
    writer can neither lower nor move it without a change.
    """
    if not isinstance(old, dict):
        return True
    own = record.get("revision")
    record["revision"] = revisions.of(old)
    if record == old:
        return False
    record["revision"] = own
    return True


def _counter(doc) -> int:
    """The last revision the node gave out (0 before the first)."""
    return _own((doc.get("revisions") or {}).get(revisions.COUNTER))


def _content_changed(value, old) -> bool:
    """Whether a whole-section object leaves a transaction with other content than the snapshot's."""
    if old is None:
        return True
    if isinstance(value, Section):
        return bool(value.deleted - value.copies.keys()) or any(
            key not in old or item != old[key] for key, item in value.copies.items())
    return value != old


def _fill_revisions(doc: dict, spec: Revisioned) -> None:
    """Records written before revisions existed (or with a broken one) are at revision 1, and
    the node-wide counter starts at the highest revision stored (state from before it existed)."""
    highest = _counter(doc)
    for name in spec.records:
        section = doc.get(name)
        if isinstance(section, dict):
            for record in section.values():
                if isinstance(record, dict):
                    if not revisions.valid(record.get("revision")):
                        record["revision"] = 1
                    highest = max(highest, record["revision"])
    for name in spec.whole:
        highest = max(highest, revisions.of_section(doc, name))
    if highest != _counter(doc):
        if not isinstance(doc.get("revisions"), dict):
            doc["revisions"] = {}
        doc["revisions"][revisions.COUNTER] = highest


def _encode(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _entry(key, value) -> bytes:
    """One member of an object, `"key":value`, as json.dumps writes it inside the object."""
    if not isinstance(key, str):
        raise TypeError(f"state keys are strings, not {type(key).__name__} ({key!r})")
    return _encode(key) + b":" + _encode(value)


def _copy(value):
    """A deep copy of a JSON value (dicts, lists, scalars), much cheaper than copy.deepcopy."""
    if type(value) is dict:
        out = value.copy()
        for key, item in out.items():
            if type(item) is dict or type(item) is list:
                out[key] = _copy(item)
        return out
    if type(value) is list:
        return [_copy(item) if type(item) is dict or type(item) is list else item for item in value]
    return value


class Section(MutableMapping):
    """A transaction's copy-on-access view of one object section of the document.

    A record (the value under one key) is copied the first time it is read
    here, so the caller may change it freely; at commit only the records that
    were replaced, added, deleted or changed in their copy are re-encoded, and
    the others keep their bytes and their snapshot objects. A write inside one
    record of a 1 MB section thus costs about the record, not the section.
    A copy counts as changed when it is no longer == the snapshot's record
    (so 1 -> 1.0 or 1 -> True inside a read copy is not seen; assign the
    record, `section[key] = record`, to force it).
    """

    def __init__(self, base: dict, members: dict):
        self._base = base          # the snapshot's records, never mutated
        self._members = members    # key -> `"key":value` bytes of the snapshot
        self.copies: dict = {}          # key -> this transaction's value
        self.assigned: set = set()      # keys given a value here (always re-encoded)
        self.deleted: set = set()       # snapshot keys removed (possibly given again later)

    def __getitem__(self, key):
        try:
            return self.copies[key]
        except KeyError:
            pass
        if key in self.deleted or key not in self._base:
            raise KeyError(key)
        value = self.copies[key] = _copy(self._base[key])
        return value

    def __setitem__(self, key, value):
        self.copies[key] = value   # after a delete it lands at the end, as in a dict
        self.assigned.add(key)

    def __delitem__(self, key):
        if key not in self:
            raise KeyError(key)
        self.copies.pop(key, None)
        self.assigned.discard(key)
        if key in self._base:
            self.deleted.add(key)

    def __contains__(self, key):
        return key in self.copies or (key in self._base and key not in self.deleted)

    def __iter__(self):
        for key in self._base:
            if key not in self.deleted:
                yield key
        for key in list(self.copies):
            if key not in self._base or key in self.deleted:
                yield key

    def __len__(self):
        added = sum(1 for key in self.copies if key not in self._base or key in self.deleted)
        return len(self._base) - len(self.deleted) + added

    def clear(self):
        self.deleted.update(self._base)
        self.copies.clear()
        self.assigned.clear()

    def result(self) -> tuple[dict, dict, bool]:
        """(records, members, changed): the section after this transaction."""
        changed = {key: value for key, value in self.copies.items()
                   if key in self.assigned or key not in self._base or value != self._base[key]}
        if not changed and not self.deleted:
            return self._base, self._members, False
        records, members = self._base.copy(), self._members.copy()
        for key in self.deleted:
            del records[key], members[key]
        for key, value in changed.items():
            members[key] = _entry(key, value)
            records[key] = value
        return records, members, True


class Transaction(MutableMapping):
    """A private, copy-on-access view of the document for one transaction.

    An object section is handed out as a Section (copy-on-access per record);
    any other section is decoded from its bytes the first time it is read.
    Untouched sections keep their bytes and their snapshot objects.
    """

    def __init__(self, snapshot: dict, encoded: dict):
        self._snapshot = snapshot
        self._encoded = encoded    # name -> JSON bytes, or {key: member bytes} for an object section
        self.copies: dict = {}      # name -> this transaction's own value
        self.deleted: set = set()

    def __getitem__(self, name):
        if name in self.copies:
            return self.copies[name]
        if name in self.deleted or name not in self._snapshot:
            raise KeyError(name)
        encoded = self._encoded[name]
        if isinstance(encoded, dict):
            value = Section(self._snapshot[name], encoded)
        else:
            value = json.loads(encoded)
        self.copies[name] = value
        return value

    def __setitem__(self, name, value):
        self.copies[name] = value   # after a delete it lands at the end, as in a dict

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        self.copies.pop(name, None)
        if name in self._snapshot:
            self.deleted.add(name)

    def __contains__(self, name):
        return name in self.copies or (name in self._snapshot and name not in self.deleted)

    def __iter__(self):
        names = [n for n in self._snapshot if n not in self.deleted]
        return iter(names + [n for n in self.copies if n not in self._snapshot or n in self.deleted])

    def __len__(self):
        return sum(1 for _ in self)

    def clear(self):
        self.deleted.update(self._snapshot)
        self.copies.clear()


def _encode_section(value):
    """(snapshot value, encoded form): an object section is kept as its members' bytes."""
    if isinstance(value, Section):
        records, members, _ = value.result()
        return records, members
    if type(value) is dict:
        return value, {key: _entry(key, item) for key, item in value.items()}
    return value, _encode(value)


def _differs(new, old) -> bool:
    """Whether a section's encoding changed, key order included."""
    if new is old:
        return False
    return new != old or (isinstance(new, dict) and list(new) != list(old))


def _document_parts(encoded: dict) -> list:
    """The document's bytes as parts for atomic_write: the sections are never concatenated."""
    parts = [b"{"]
    for index, (name, value) in enumerate(encoded.items()):
        parts.append((b"," if index else b"") + _encode(name) + b":")
        parts += (b"{", b",".join(value.values()), b"}") if isinstance(value, dict) else (value,)
    parts.append(b"}")
    return parts


class Store:
    """The document whose top-level sections are `sections` ({name: factory of its default}).

    The daemon passes the whole schema (contentnode.schema.SECTIONS); the offline
    account commands only the sections they touch. Both pass the schema's
    revisioned objects (contentnode.schema.REVISIONED).
    """

    def __init__(self, data_dir: str, sections: Mapping[str, Callable[[], object]],
                 revisioned: Revisioned | None = None):
        self.path = os.path.join(data_dir, STATE_FILE)
        self.sections = dict(sections)
        self.revisioned = revisioned
        self._lock = threading.RLock()
        self._encoded: dict = {}  # section name -> its JSON bytes, or {key: member bytes} for an object
        self._data: dict = {}
        self._stamp: bytes | None = None  # _STAMP of the file's (inode, mtime) as last loaded or written, see follow()
        self._shared: mmap.mmap | None = None  # the mmap of CHANGES_FILE once share_changes() ran
        self._commit_listeners: list[Callable[[frozenset], None]] = []

    def add_commit_listener(self, listener: Callable[[frozenset], None]) -> None:
        """listener(changed section names) after every durable commit, in the writer's thread
        and under the store's lock: it must only note or enqueue, never write the store."""
        self._commit_listeners.append(listener)

    def load(self) -> None:
        """Read the document (or start an empty one). Corrupt or unreadable: StoreError."""
        stamp = _file_stamp(self.path)   # before the read: a write in between is seen by follow()
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raise StoreError(f"cannot read the state file {self.path}: {exc.strerror}") from None
        doc: dict
        if raw is None:
            doc = {"schema": SCHEMA_VERSION}
        else:
            try:
                doc = json.loads(raw)
            except (UnicodeDecodeError, ValueError) as exc:
                raise StoreError(f"the state file {self.path} is corrupt ({exc}); restore it from a "
                                 f"backup or the pre-restore copy, it was not changed") from None
            if not isinstance(doc, dict):
                raise StoreError(f"the state file {self.path} is not a JSON object")
            doc = migrate(doc, self.path)
        for name, factory in self.sections.items():
            doc.setdefault(name, factory())
        if self.revisioned is not None:
            _fill_revisions(doc, self.revisioned)
        self._encoded = {name: _encode_section(value)[1] for name, value in doc.items()}
        self._data = doc
        self._stamp = stamp   # after the data: a thread that sees this stamp in follow() also sees the document
        if raw is None:
            atomic_write(self.path, _document_parts(self._encoded))
            self._written()

    def share_changes(self) -> None:
        """Publish every write in CHANGES_FILE, a small file all processes of the node map.

        It holds the (inode, mtime) of the state file as last written; a reader
        compares it with what it loaded (a memory compare, no system call), so
        follow() costs a request almost nothing until something changed.
        """
        fd = os.open(os.path.join(os.path.dirname(self.path), CHANGES_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < _STAMP.size:
                os.ftruncate(fd, _STAMP.size)
            self._shared = mmap.mmap(fd, _STAMP.size)
        finally:
            os.close(fd)

    def publish(self) -> None:
        """Tell the other processes which state file this one holds (the daemon, once loaded)."""
        if self._shared is not None and self._stamp is not None:
            self._shared[:_STAMP.size] = self._stamp

    def _written(self) -> None:
        self._stamp = _file_stamp(self.path)
        self.publish()

    def follow(self) -> None:
        """Load the file again when another process replaced it since this one last read or wrote it.

        A public worker calls this before every request, so a change the daemon's
        admin API has acknowledged is served by the very next request: the
        writer publishes the new file's stamp (share_changes) before it answers.
        Without a shared stamp, or when it differs, one stat decides: every write
        renames a new file in (atomic_write), so the inode changes even when the
        clock's granularity leaves the mtime the same.
        """
        if self._shared is not None and self._shared[:_STAMP.size] == self._stamp:
            return
        stamp = _file_stamp(self.path)
        if stamp == self._stamp:
            return
        with self._lock:
            if _file_stamp(self.path) == self._stamp:
                return   # another thread loaded it meanwhile
            try:
                self.load()
            except StoreError as exc:   # keep serving the last good document; the next write retries
                log.error("cannot reload the state file: %s", exc)

    def section_defaults(self) -> dict:
        """{name: default value} of every declared section, fresh copies."""
        return {name: factory() for name, factory in self.sections.items()}

    @property
    def data(self) -> dict:
        """The current document. Read it; never mutate it."""
        return self._data

    @contextmanager
    def transaction(self):
        """A private view to mutate; written durably on a clean exit, discarded otherwise."""
        with self._lock:
            tx = Transaction(self._data, self._encoded)
            yield tx
            if self.revisioned is not None:
                self._stamp_revisions(tx)
            data, encoded, names = {}, {}, set(tx.deleted & self._data.keys())
            for name in tx:
                if name in tx.copies:
                    data[name], encoded[name] = _encode_section(tx.copies[name])
                    if _differs(encoded[name], self._encoded.get(name)):
                        names.add(name)
                else:
                    data[name], encoded[name] = self._data[name], self._encoded[name]
            if names:
                atomic_write(self.path, _document_parts(encoded))
                self._data, self._encoded = data, encoded
                self._written()
                self._announce(frozenset(names))

    def _announce(self, names: frozenset) -> None:
        for listener in self._commit_listeners:
            try:
                listener(names)
            except Exception:  # a listener's bug must not fail a write that is already durable
                log.exception("commit listener failed")

    def _view_changed(self, tx: Transaction, name: str, project) -> bool:
        """Whether the transaction added or deleted a record of section `name`, or changed one's projection."""
        old = self._data.get(name)
        if name not in tx.copies:
            return name in tx.deleted and bool(old)
        value = tx.copies[name]
        if not isinstance(value, Mapping) or not isinstance(old, Mapping):
            return value != old
        if isinstance(value, Section):
            if value.deleted - value.copies.keys():
                return True
            touched: Mapping = value.copies
        elif value.keys() != old.keys():
            return True
        else:
            touched = value
        return any(key not in old or project(name, record) != project(name, old[key])
                   for key, record in touched.items())

    def _stamp_revisions(self, tx: Transaction) -> None:
        """Give every updatable object this transaction changed (and only those) the next
        revision of the node-wide counter: above every revision the node gave out and any
        the changed objects brought along (a restore's), so none ever repeats."""
        revisioned = self.revisioned
        if revisioned is None:
            return
        records = []
        for name in revisioned.records:
            section = tx.copies.get(name)
            if isinstance(section, Mapping):
                base = self._data.get(name) or {}
                touched = section.copies if isinstance(section, Section) else section
                records += [record for key, record in touched.items()
                            if isinstance(record, dict) and _changed_record(record, base.get(key))]
        whole = sorted(name for name in revisioned.whole
                       if name in tx.copies and _content_changed(tx.copies[name], self._data.get(name)))
        whole += sorted(name for name, (sections, project) in revisioned.views.items()
                        if any(self._view_changed(tx, section, project) for section in sections))
        if not records and not whole and "revisions" not in tx.copies:
            return
        given = tx.copies.get("revisions")
        given = given if isinstance(given, Mapping) else {}
        counter = max(_counter(self._data), _own(given.get(revisions.COUNTER)))
        if records or whole:
            counter = max([counter] + [_own(r.get("revision")) for r in records]
                          + [_own(given.get(name)) for name in whole]) + 1
        for record in records:
            record["revision"] = counter
        stamped = {name: counter if name in whole else revisions.of_section(self._data, name)
                   for name in sorted(revisioned.named)}
        tx["revisions"] = dict(stamped, **{revisions.COUNTER: counter})


def _file_stamp(path: str):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return _STAMP.pack(st.st_ino, st.st_mtime_ns)
