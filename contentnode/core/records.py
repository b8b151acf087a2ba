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
DERIVED = object()     # a default the record's module works out from the other fields (never filled at load)


@dataclass(frozen=True)
class Field:
    shape: dict                                   # the member's JSON shape (core/shapes.py)
    default: object = _REQUIRED                   # stored when a create leaves it out, filled in at load
    rule: Callable[[Any], Any] | None = None      # the record rule: value to store, or FieldError
    secret: bool = False                          # write-only: never answered, never in a plain backup
    editable: bool = True                         # taken from a create or update body (else the node writes it)
    since: int = FIRST_VERSION                    # the schema version whose load fills the default in

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    @property
    def filled(self) -> bool:
        """Whether the load gives a record lacking it the default."""
        return self.default is not _REQUIRED and self.default is not DERIVED


@dataclass(frozen=True)
class Record:
    """One stored record: `kind` names it in messages ("rule"), `fields` the members of every
    record; a record of several kinds ("s3", "folder" buckets) names its kind in the `by` field
    and adds the members of `kinds[kind]`. `unique` gives the value at most one record of the
    section may have (None: no such rule); `rule` checks what spans fields of a whole record."""

    kind: str
    fields: Mapping[str, Field]
    unique: Callable[[Mapping], Any] | None = None
    by: str | None = None
    kinds: Mapping[str, Mapping[str, Field]] = field(default_factory=dict)
    rule: Callable[[Any], None] | None = None

    def every(self) -> dict:
        """{name: Field} of every member any kind declares."""
        out = dict(self.fields)
        for members in self.kinds.values():
            out.update(members)
        return out

    def of(self, record: Mapping) -> dict:
        """{name: Field} of the members of this record's kind."""
        if self.by is None:
            return dict(self.fields)
        return {**self.fields, **self.kinds.get(str(record.get(self.by)), {})}

    def defaults(self) -> dict:
        return {name: f.default for name, f in self.fields.items() if f.filled}

    def secrets(self) -> frozenset:
        return frozenset(name for name, f in self.every().items() if f.secret)

    def body(self, create: bool, extra: Mapping[str, dict] | None = None, description: str | None = None) -> dict:
        """The JSON shape of a create (required fields required) or update (every field optional) body."""
        members = {name: f.shape for name, f in self.every().items() if f.editable and (create or name != self.by)}
        required = [name for name, f in self.fields.items() if f.editable and f.required] if create else ()
        return obj({**members, **(extra or {})}, required=required, description=description)

    def answer(self, extra: Mapping[str, dict] | None = None, optional=()) -> dict:
        """The JSON shape of the record as answered: every declared member (a kind's only on records of
        that kind) but the secret ones, each stored as the load fills defaults in, then `extra`."""
        members = {name: f.shape for name, f in self.every().items() if not f.secret}
        by_kind = tuple(name for name in members if name not in self.fields)
        return answer_shape({**members, **(extra or {})}, optional=(*by_kind, *optional))

    def read(self, body: Mapping, partial: bool, names=None) -> dict:
        """The stored values of the fields `body` gives (of `names`, every editable one of the
        record by default), by shape and rule; FieldError for the first that breaks one, or a
        required one missing unless partial."""
        declared, out = self.every(), {}
        for name in names or [n for n, f in self.fields.items() if f.editable]:
            f = declared[name]
            if name not in body:
                if f.required and not partial:
                    raise FieldError(f"{name} is required", name)
                continue
            check(f.shape, body[name], name)
            out[name] = f.rule(body[name]) if f.rule is not None else body[name]
        return out

    def check_stored(self, record: Mapping) -> None:
        """FieldError unless every member of the record's kind is present, of its shape and as its
        rule stores it, and the record keeps its cross-field rule."""
        if self.by is not None:
            check(self.fields[self.by].shape, record.get(self.by), self.by)
            foreign = sorted(set(record) & (set(self.every()) - set(self.of(record))))
            if foreign:
                raise FieldError(f"{foreign[0]} is not a field of {record[self.by]} {self.kind}s", foreign[0])
        for name, f in self.of(record).items():
            if name not in record:
                raise FieldError(f"{name} is missing", name)
            check(f.shape, record[name], name)
            if f.rule is not None and f.rule(record[name]) != record[name]:
                raise FieldError(f"{name} is not in its stored form", name)
        if self.rule is not None:
            self.rule(record)

    def fill(self, record: dict, since: int | None = None) -> None:
        """Give `record` the default of each member it lacks (those added at version `since`)."""
        for members in (self.fields, None):   # `by` first: the kind's members follow from it
            for name, f in (members or self.of(record)).items():
                if f.filled and name not in record and (since is None or f.since == since):
                    record[name] = f.default

    def fill_section(self, section, since: int | None = None) -> None:
        """fill() every record of a section ({key: record}); what is not an object is left to the checks."""
        if isinstance(section, dict):
            for record in section.values():
                if isinstance(record, dict):
                    self.fill(record, since)

    def clash(self, section: Mapping, record: Mapping, own_key=None):
        """The key of another record of `section` with the same unique value as `record`, or None."""
        assert self.unique is not None
        wanted = self.unique(record)
        for key, other in section.items():
            if key != own_key and self.unique(other) == wanted:
                return key
        return None

    def first_clash(self, section: Mapping):
        """(key, earlier key) of the first record whose unique value an earlier one already has, or None."""
        assert self.unique is not None
        seen: dict = {}
        for key, record in section.items():
            earlier = seen.setdefault(self.unique(record), key)
            if earlier != key:
                return key, earlier
        return None
