"""Revisions of the updatable objects (docs/API.md, "Revisions, ETag and If-Match"): safe concurrent edits.

Each rule, domain, bucket and user record carries "revision", and the
settings, policy and notifications each have one in the "revisions" section.
The store raises them when it commits a change (store.Store, `revisioned=`),
so no write path - a handler, a background check, an offline command, a
restore - can change an object and leave its revision behind.

Revisions come from one node-wide counter (as etcd's mod_revision), kept in
the "revisions" section under COUNTER: a commit that changes objects takes
the next number and gives it to each of them. So a revision never repeats
for a name: a domain deleted and added again gets a number above every one
its earlier self had, and an If-Match from before the delete gets 412. A client that
sends back the revision it read (If-Match) gets the change refused when the
object moved on since: require() is called inside the same transaction as
the write, so no other write can slip between the comparison and the change.
"""

ANY = "*"
COUNTER = "counter"  # the "revisions" member holding the last revision the node gave out


class StaleRevision(Exception):
    """The object is no longer at the revision the client read; nothing was changed."""

    def __init__(self, what: str, expected: int | str, current: int):
        super().__init__(f"{what} was changed since you read it (you sent revision {expected}, it is now at "
                         f"revision {current}); read it again and reapply your change")
        self.message = str(self)
        self.current = current


def valid(value) -> bool:
    """Whether value can be a revision: a whole number from 1 up (not a bool)."""
    return type(value) is int and value >= 1


def _or_first(value) -> int:
    """A stored revision, or 1 where none (or a broken one) is stored: written before revisions existed."""
    return value if type(value) is int and value >= 1 else 1


def of(record) -> int:
    """The revision of a stored record (rule, domain, bucket, user)."""
    return _or_first(record.get("revision") if isinstance(record, dict) else None)


def of_section(doc, name: str) -> int:
    """The revision of a whole-section object (settings, policy, notifications) in a document."""
    return _or_first((doc.get("revisions") or {}).get(name))


def stamp_if_changed(record: dict, before: dict, stamp: str) -> bool:
    """Set updated_at to `stamp` only when the write changed the record: a write of the same
    values leaves it as it was, so the store keeps its revision too. True when it changed."""
    changed = record != before
    if changed:
        record["updated_at"] = stamp
    return changed


def require(what: str, current: int, expected: int | str | None) -> None:
    """Refuse (StaleRevision) when the client's If-Match names another revision.

    expected is what the http layer parsed: None (no If-Match: the write
    applies), "*" (any revision of an existing object) or a revision number.
    """
    if expected is None or expected == ANY or expected == current:
        return
    raise StaleRevision(what, expected, current)
