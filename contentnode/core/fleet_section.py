"""The fleet section of the state document: this node's role in a fleet and what it knows of it.

Declared in core, below the fleet package that writes it, so that the store's
migrations (core/migrations.py) fill it in and the readiness rule
(core/readiness.py) reads it without either importing the fleet. Only the
role has a default; the other members (fleet_id, bucket, seq, applied_at,
pin, ...) are written by the fleet package when the node joins or leads one.
"""

from contentnode.core.records import Field, Record
from contentnode.core.shapes import one_of

SECTION = "fleet"
ROLES = ("standalone", "primary", "replica")

FLEET = Record("fleet section", {
    "role": Field(one_of(*ROLES), "standalone"),
})


def state_of(doc: dict) -> dict:
    """The fleet section of `doc` (its defaults when a document has none, as the offline commands' may)."""
    return doc.get(SECTION) or FLEET.defaults()
