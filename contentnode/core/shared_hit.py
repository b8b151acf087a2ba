"""What a stored answer's hits need, parsed once per cache entry instead of once per hit.

A stored answer's fields, directives, age when received and the fields a hit
sends never change while its cache entry lives (a 304 refresh or a new
answer makes a new entry), so the shared cache reads them once, when a hit
first needs them, and keeps them with the entry (Entry.memo). A hit then
computes only what truly varies: its Age, its freshness left, and the
request's own directives.
"""

import math
from dataclasses import dataclass, field

from contentnode.core import http_cache as hc
from contentnode.core.cache_entries import Entry
from contentnode.core.forwarding import response_fields

# what the node computes or frames itself when it answers
NOT_SENT = frozenset({"content-length", "age", "cache-status", "x-cache"}) | hc.HOP_BY_HOP


@dataclass
class Parsed:
    """One entry's stored answer, read: its fields (lower-case names), the directives this cache
    obeys, its age when received and when that was, the fields a hit sends before Age,
    Cache-Status and X-Cache, and the validators among them (Exchange.validators). `derived`
    keeps what callers derive from those (by their own key)."""

    fields: dict
    directives: dict
    received_age: float
    response_time: float
    head: list
    validators: dict
    derived: dict = field(default_factory=dict)

    def age(self, now: float) -> float:
        """The current age (RFC 9111 §4.2.3): its age when received, plus the time since."""
        return self.received_age + max(0.0, now - self.response_time)

    def steady_until(self, lifetime: float, now: float) -> float:
        """Until when a hit's answer found at `now` stays the same: its Age (whole seconds of age) and
        every freshness decision (the freshness left, compared with whole seconds: Cache-Status
        ttl, max-age, min-fresh, max-stale, the stale windows) change only where the age or the
        freshness left crosses a whole second; `now` itself where either is one already (or the
        clock is before the answer's receipt)."""
        if now < self.response_time:
            return now
        age = self.age(now)
        left = lifetime - age
        if age == math.floor(age) or left == math.floor(left):
            return now
        return now + min(math.floor(age) + 1 - age, left - math.floor(left))


def parsed(entry: Entry) -> Parsed:
    """The entry's Parsed, made at its first use (two threads making it at once make equal ones)."""
    memo = entry.memo
    if not isinstance(memo, Parsed):
        memo = entry.memo = _parse(entry.meta)
    return memo


def _parse(meta: dict) -> Parsed:
    fields = dict(meta["fields"])
    sent = hc.unvalidated_fields(fields)
    head = response_fields((name, value) for name, value in sent.items() if name.lower() not in NOT_SENT)
    return Parsed(fields, hc.response_directives(fields),
                  hc.age_at_receipt(fields, meta["request_time"], meta["response_time"]), meta["response_time"],
                  head, {"etag": _sent(head, "etag"), "last_modified": _sent(head, "last-modified")})


def _sent(head: list, name: str) -> str | None:
    return next((value for key, value in head if key.lower() == name), None)
