"""Each stored record declared once: its fields, their shapes, defaults and record rules.

A Record table is the one place a record's fields are written down. What
every other part needs derives from it: the API's create and update bodies
and its answer schema (body(), answer()), the values a handler stores
(read()), the restore and fleet-bundle checks (check_stored()), uniqueness
within the section (clash(), first_clash()), and the defaults the store fills
when it loads a document written before a field existed (fill(), run by the
migrations in core/migrations.py). Readers can therefore index every declared
field directly.

Adding a field is one line in its table: Field(shape, default, since=N) where
N is the next schema version (the schema version is the highest `since`
declared, so the line also bumps it and the load fills the default in).
Shapes are core/shapes.py's JSON schemas; `rule` is the record rule beyond
the shape (a normalised host, a path): it returns the value to store or
raises FieldError naming the field.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contentnode.core.fields import FieldError
from contentnode.core.shapes import answer as answer_shape
from contentnode.core.shapes import check, obj

FIRST_VERSION = 2      # the schema version that introduced record tables (and filled every default they declare)
_REQUIRED = object()   # a field without a default: a create must give it


@dataclass(frozen=True)
class Field:
    shape: dict                                   # the member's JSON shape (core/shapes.py)
    default: object = _REQUIRED                   # stored when a create leaves it out, filled in at load
    rule: Callable[[Any], Any] | None = None      # the record rule: value to store, or FieldError
    secret: bool = False                          # never answered, never in a plain backup
    since: int = FIRST_VERSION                    # the schema version whose load fills the default in

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True)
class Record:
    """One stored record: `kind` names it in messages ("rule"), `fields` its declared members,
    `unique` the fields whose values together name at most one record of its section."""

    kind: str
    fields: Mapping[str, Field]
    unique: tuple = ()
    extra: Mapping[str, dict] = field(default_factory=dict)  # answered members the node writes (stamps, views)

    def defaults(self) -> dict:
        return {name: f.default for name, f in self.fields.items() if not f.required}

    def body(self, create: bool) -> dict:
        """The JSON shape of a create (required fields required) or update (every field optional) body."""
        required = [name for name, f in self.fields.items() if f.required] if create else ()
        return obj({name: f.shape for name, f in self.fields.items()}, required=required)

    def answer(self, extra: Mapping[str, dict] | None = None, optional=()) -> dict:
        """The JSON shape of the record as answered: every declared field but the secret ones (all
        stored, as the load fills defaults in), then the node's own members (`extra`)."""
        members = {name: f.shape for name, f in self.fields.items() if not f.secret}
        return answer_shape({**members, **(extra or {})}, optional=optional)

    def read(self, body: Mapping, partial: bool, names=None) -> dict:
        """The stored values of the fields `body` gives (of `names`, all by default), by shape and
        rule; FieldError for the first that breaks one, or a required one missing unless partial."""
        out = {}
        for name in names or self.fields:
            f = self.fields[name]
            if name not in body:
                if f.required and not partial:
                    raise FieldError(f"{name} is required", name)
                continue
            check(f.shape, body[name], name)
            out[name] = f.rule(body[name]) if f.rule is not None else body[name]
        return out

    def check_stored(self, record: Mapping) -> None:
        """FieldError unless every declared field is present, of its shape, and as its rule stores it."""
        for name, f in self.fields.items():
            if name not in record:
                raise FieldError(f"{name} is missing", name)
            check(f.shape, record[name], name)
            if f.rule is not None and f.rule(record[name]) != record[name]:
                raise FieldError(f"{name} is not in its stored form", name)

    def fill(self, record: dict, since: int | None = None) -> None:
        """Give `record` the default of each declared field it lacks (those added at version `since`)."""
        for name, f in self.fields.items():
            if not f.required and name not in record and (since is None or f.since == since):
                record[name] = f.default

    def fill_section(self, section, since: int | None = None) -> None:
        """fill() every record of a section ({key: record}); what is not an object is left to the checks."""
        if isinstance(section, dict):
            for record in section.values():
                if isinstance(record, dict):
                    self.fill(record, since)

    def _key(self, record: Mapping) -> tuple:
        return tuple(record.get(name) for name in self.unique)

    def clash(self, section: Mapping, record: Mapping, own_key=None):
        """The key of another record of `section` with the same unique fields as `record`, or None."""
        wanted = self._key(record)
        for key, other in section.items():
            if key != own_key and self._key(other) == wanted:
                return key
        return None

    def first_clash(self, section: Mapping):
        """(key, earlier key) of the first record whose unique fields an earlier one already has, or None."""
        seen: dict = {}
        for key, record in section.items():
            earlier = seen.setdefault(self._key(record), key)
            if earlier != key:
                return key, earlier
        return None
