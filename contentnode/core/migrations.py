"""The state document's schema version and the migrations that bring an older one up to it.

Here in core, so that the store (which loads the state file) and a backup
restore (core/backup.py) migrate the same way without core importing the
store. Each version from 2 up fills in the defaults of the record fields that
version declared (core/records.py `since`), so the version is the highest
`since` of the record tables and a new field's line bumps it; a change that
is more than a new default adds its step to _STEPS.
"""

from collections.abc import Callable, Mapping
from types import MappingProxyType

from contentnode.core import rules
from contentnode.core.records import FIRST_VERSION

# each stored record table and the section holding its records
RECORDS = {"rules": rules.RULE}

SCHEMA_VERSION = max(FIRST_VERSION, *(f.since for table in RECORDS.values() for f in table.fields.values()))

# Steps beyond filling defaults: _STEPS[v] turns a version-v document into version v+1 first.
_STEPS: Mapping[int, Callable[[dict], dict]] = MappingProxyType({})


class StoreError(Exception):
    """The state file cannot be used; the daemon must stop rather than reset it."""


class NewerStateError(StoreError):
    """The state file was written by a newer version: only that version (or newer) may run,
    and nothing here may rewrite it. `contentnode serve` exits 2, which the unit does not restart."""


def fill_defaults(doc: dict, since: int | None = None) -> None:
    """Give each record of `doc`'s record sections the declared defaults it lacks (those of version `since`)."""
    for name, table in RECORDS.items():
        table.fill_section(doc.get(name), since)


def migrate(doc: dict, path: str) -> dict:
    """`doc` brought up to SCHEMA_VERSION; StoreError (naming `path`) when it cannot be."""
    version = doc.get("schema")
    if not isinstance(version, int):
        raise StoreError(f"{path}: no schema version; is this a contentnode state file?")
    if version > SCHEMA_VERSION:
        raise NewerStateError(f"{path}: schema version {version} was written by a newer contentnode "
                              f"(this one reads up to {SCHEMA_VERSION}); install that version again, "
                              "the file was not changed")
    while version < SCHEMA_VERSION:
        step = _STEPS.get(version)
        if step is not None:
            doc = step(doc)
        version += 1
        fill_defaults(doc, since=version)
        doc["schema"] = version
    return doc
