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
from contextlib import contextmanager

from contentnode.fileio import atomic_write

SCHEMA_VERSION = 1
STATE_FILE = "state.json"

# Top-level sections of the document: name -> factory of its default value.
_SECTIONS = {}
# Migrations: MIGRATIONS[v] turns a version-v document into version v+1.
MIGRATIONS = {}


class StoreError(Exception):
    """The state file cannot be used; the daemon must stop rather than reset it."""


def register_section(name: str, default_factory) -> None:
    """Declare a top-level key of the document (a resource area's own data)."""
    _SECTIONS.setdefault(name, default_factory)


def section_defaults() -> dict:
    """{name: default value} of every registered section, fresh copies."""
    return {name: factory() for name, factory in _SECTIONS.items()}


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


def _encode(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class Store:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, STATE_FILE)
        self._lock = threading.RLock()
        self._raw = b""
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
        for name, factory in _SECTIONS.items():
            doc.setdefault(name, factory())
        self._raw = _encode(doc)
        self._data = doc
        if raw is None:
            atomic_write(self.path, self._raw)

    @property
    def data(self) -> dict:
        """The current document. Read it; never mutate it."""
        return self._data

    @contextmanager
    def transaction(self):
        """A private copy to mutate; written durably on a clean exit, discarded otherwise."""
        with self._lock:
            doc = json.loads(self._raw)
            yield doc
            raw = _encode(doc)
            if raw != self._raw:
                atomic_write(self.path, raw)
                self._raw = raw
                self._data = doc
