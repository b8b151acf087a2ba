"""The state store: one JSON document with durable, atomic transactions.

Readers take `store.data`, a snapshot they must not mutate. Writers use
`with store.transaction() as doc:` on a private copy; on a clean exit the copy
is written durably (fileio.atomic_write) and only then becomes the new
snapshot. An exception inside the block, or a failed write, leaves memory and
disk as they were. Append-heavy data (audit, traffic, cache) lives elsewhere.
"""

import json
import os
import threading
from collections.abc import Callable, Mapping, MutableMapping
from contextlib import contextmanager
from types import MappingProxyType

from contentnode.fileio import atomic_write

SCHEMA_VERSION = 1
STATE_FILE = "state.json"

# Migrations: MIGRATIONS[v] turns a version-v document into version v+1. Declared
# here beside SCHEMA_VERSION, which goes up by one with each entry added.
MIGRATIONS: Mapping[int, Callable[[dict], dict]] = MappingProxyType({})


class StoreError(Exception):
    """The state file cannot be used; the daemon must stop rather than reset it."""


def migrate(doc: dict, path: str) -> dict:
    version = doc.get("schema")
    if not isinstance(version, int):
        raise StoreError(f"{path}: no schema version; is this a contentnode state file?")
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: schema version {version} was written by a newer contentnode "
                         f"(this one reads up to {SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        doc = MIGRATIONS[version](doc)
        version += 1
        doc["schema"] = version
    return doc


def _encode(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _join(encoded: dict) -> bytes:
    """The document's bytes from its sections' encodings, in order."""
    return b"{" + b",".join(_encode(name) + b":" + data for name, data in encoded.items()) + b"}"


class Transaction(MutableMapping):
    """A private, copy-on-access view of the document for one transaction.

    A section is decoded from its cached encoding the first time it is read
    or replaced here, so a write costs the sections it touches, not the whole
    document; untouched sections keep their bytes and their snapshot objects.
    """

    def __init__(self, snapshot: dict, encoded: dict):
        self._snapshot = snapshot
        self._encoded = encoded
        self.copies = {}      # name -> this transaction's own value
        self.deleted = set()

    def __getitem__(self, name):
        if name in self.copies:
            return self.copies[name]
        if name in self.deleted or name not in self._snapshot:
            raise KeyError(name)
        value = self.copies[name] = json.loads(self._encoded[name])
        return value

    def __setitem__(self, name, value):
        self.deleted.discard(name)
        self.copies[name] = value

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(name)
        self.copies.pop(name, None)
        self.deleted.add(name)

    def __contains__(self, name):
        return name in self.copies or (name in self._snapshot and name not in self.deleted)

    def __iter__(self):
        names = [n for n in self._snapshot if n not in self.deleted]
        return iter(names + [n for n in self.copies if n not in self._snapshot])

    def __len__(self):
        return sum(1 for _ in self)


class Store:
    """The document whose top-level sections are `sections` ({name: factory of its default}).

    The daemon passes the whole schema (contentnode.schema.SECTIONS); the offline
    account commands only the sections they touch.
    """

    def __init__(self, data_dir: str, sections: Mapping[str, Callable[[], object]]):
        self.path = os.path.join(data_dir, STATE_FILE)
        self.sections = dict(sections)
        self._lock = threading.RLock()
        self._encoded = {}  # section name -> its JSON bytes, as on disk
        self._data = {}

    def load(self) -> None:
        """Read the document (or start an empty one). Corrupt or unreadable: StoreError."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raise StoreError(f"cannot read the state file {self.path}: {exc.strerror}") from None
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
        self._encoded = {name: _encode(value) for name, value in doc.items()}
        self._data = doc
        if raw is None:
            atomic_write(self.path, _join(self._encoded))

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
            data, encoded, changed = {}, {}, bool(tx.deleted & self._data.keys())
            for name in tx:
                if name in tx.copies:
                    data[name] = tx.copies[name]
                    encoded[name] = _encode(data[name])
                    changed = changed or encoded[name] != self._encoded.get(name)
                else:
                    data[name], encoded[name] = self._data[name], self._encoded[name]
            if changed:
                atomic_write(self.path, _join(encoded))
                self._data, self._encoded = data, encoded
