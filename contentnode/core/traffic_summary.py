"""A bounded top-K summary (Space-Saving with batched eviction) of requests and bytes by key.

The top paths or clients of a domain must be found without holding every
distinct path or client, which anonymous clients choose. Counts arrive a
batch at a time (a fold's exact counts, another worker's or another minute's
summary: merge()); when a batch leaves more than 2 * keep keys, the summary
keeps the `keep` keys with the largest estimates and remembers the largest
estimate it dropped as its floor, so eviction costs one sort per at least
`keep` new keys. A new key starts at the floor (it may have been dropped
before with that many requests), so a key seen more often than
(requests / keep) stays in the summary whatever else arrives. Each key keeps
two counts: the estimate (which decides what is kept) and what it was seen
doing since it last entered (what the API shows). While no key was ever
dropped (floor 0) both are exact.

The counts are three dicts by key, added a batch at a time with no call per
key (a per-key method call costs more than the addition): the fold of every
request into these summaries is traffic insight's main cost (bench/README.md,
bench_traffic_fold.py).
"""

import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate as running_totals
from itertools import filterfalse, repeat
from operator import add, sub


def accumulate(into: dict, keys: Iterable, values: Iterable) -> None:
    """into[key] += value for each key and value in step, a missing key starting at 0 (a plain loop:
    in CPython 3.11 it is faster than the same done by maps of dict methods)."""
    for key, value in zip(keys, values):
        if key in into:
            into[key] += value
        else:
            into[key] = value


def column_sums(values: Sequence, sizes: Sequence, counts: dict) -> dict:
    """{key: the sum of its `sizes`} for each key of `counts` (the Counter of `values`, in order), by calls
    that run in C: the rows sorted by their key's number, running totals, and each key's run of
    rows read off them (a plain loop costs several times more per row)."""
    if len(counts) == len(values):
        return dict(zip(values, sizes))
    if len(counts) == 1:
        return dict.fromkeys(counts, sum(sizes))
    number = dict(zip(counts, range(len(counts))))
    order = sorted(range(len(values)), key=list(map(number.__getitem__, values)).__getitem__)
    totals = list(running_totals(map(sizes.__getitem__, order), initial=0))
    ends = list(running_totals(counts.values()))
    return dict(zip(counts, map(sub, map(totals.__getitem__, ends), map(totals.__getitem__, [0, *ends[:-1]]))))


class Summary:
    __slots__ = ("keep", "floor", "estimates", "requests", "bytes")

    def __init__(self, keep: int):
        self.keep = keep
        self.floor = 0
        # the same keys in the same order in all three (merge() walks them side by side)
        self.estimates: dict = {}   # key -> estimate (what decides what is kept)
        self.requests: dict = {}    # key -> requests seen since it last entered
        self.bytes: dict = {}       # key -> bytes seen since it last entered

    @classmethod
    def counted(cls, values: Sequence, sizes: Sequence, view: Callable[[list], Iterable],
                total: int | None = None) -> "Summary":
        """The exact counts of a column of values with each one's bytes (a fold's, never bounded: it is
        merged into bounded ones next; `total`, the sum of `sizes` when the caller has it), under the
        keys `view` makes of the distinct values in order (equal keys add up, None ones are dropped).
        The column is counted once as it came, by calls that run in C (see column_sums(); a column of
        one value, as a batch's client, status or cache outcome often is, by one compare a row); only
        its distinct values are made keys and added up."""
        if values and values.count(values[0]) == len(values):
            requests: dict = {values[0]: len(values)}
            nbytes = {values[0]: sum(sizes) if total is None else total}
        else:
            requests = Counter(values)
            nbytes = column_sums(values, sizes, requests)
        distinct = list(requests)
        keys = list(view(distinct))
        if keys != distinct:
            same = Counter(keys)
            requests = column_sums(keys, list(requests.values()), same)
            nbytes = column_sums(keys, list(nbytes.values()), same)
        requests.pop(None, None)
        nbytes.pop(None, None)
        counted = cls(len(values))
        counted.requests, counted.bytes, counted.estimates = requests, nbytes, dict(requests)
        return counted

    def rekeyed(self, keys: list) -> "Summary":
        """This summary's counts under other keys, one for each of its keys in order: equal keys add
        up, None ones are dropped (itself when nothing changes)."""
        old = list(self.estimates)
        if keys == old and None not in self.estimates:
            return self
        out = Summary(self.keep)
        out.floor = self.floor
        for name in ("estimates", "requests", "bytes"):
            counts = getattr(out, name)
            accumulate(counts, keys, map(getattr(self, name).__getitem__, old))
            counts.pop(None, None)
        return out

    def merge(self, other: "Summary") -> None:
        """Add another summary's counts (a fold's, another worker's, another minute's or hour's): the
        keys both hold added up, the others appended in the other's order (a new key's estimate from
        this floor, a key only this one holds raised by the other's floor: so no estimate undercounts
        and no key seen more than the floor is dropped), by dict and map calls that run in C (a loop
        over the keys costs several times more per key, and under a flood of new paths or clients
        nearly every key is new)."""
        estimates, theirs, floor = self.estimates, other.estimates, self.floor
        if other.floor and estimates:   # a key the other dropped may have been seen there up to its floor
            absent = list(filterfalse(theirs.__contains__, estimates))
            estimates.update(zip(absent, map(add, map(estimates.__getitem__, absent), repeat(other.floor))))
        both = list(filter(estimates.__contains__, theirs)) if estimates else []
        new = list(filterfalse(estimates.__contains__, theirs)) if both else theirs
        for mine, counts, start in ((estimates, theirs, floor), (self.requests, other.requests, 0),
                                    (self.bytes, other.bytes, 0)):
            if both:
                mine.update(zip(both, map(add, map(mine.__getitem__, both), map(counts.__getitem__, both))))
            if not both and not start:
                mine.update(counts)
            elif start:
                mine.update(zip(new, map(add, map(counts.__getitem__, new), repeat(start))))
            else:
                mine.update(zip(new, map(counts.__getitem__, new)))
        self.floor += other.floor
        if len(estimates) > 2 * self.keep:
            self._prune()

    def _prune(self) -> None:
        estimates = self.estimates
        ranked = sorted(estimates, key=estimates.__getitem__, reverse=True)
        self.floor = max(self.floor, estimates[ranked[self.keep]])
        kept = ranked[:self.keep]
        for name in ("estimates", "requests", "bytes"):
            setattr(self, name, dict(zip(kept, map(getattr(self, name).__getitem__, kept))))

    def top(self, count: int) -> list:
        """[(key, requests, bytes)] of the `count` keys seen most, most first (ties by key)."""
        requests = self.requests
        ranked = sorted(sorted(requests), key=requests.__getitem__, reverse=True)[:count]
        return list(zip(ranked, map(requests.__getitem__, ranked), map(self.bytes.__getitem__, ranked)))

    @property
    def approximate(self) -> bool:
        return self.floor > 0

    # a summary crosses the workers' pipe and the disk as [floor, [[key, estimate, requests, bytes], ...]]

    def dump(self) -> list:
        keys = list(self.estimates)
        return [self.floor, list(map(list, zip(keys, map(self.estimates.__getitem__, keys),
                                               map(self.requests.__getitem__, keys),
                                               map(self.bytes.__getitem__, keys))))]

    @classmethod
    def load(cls, keep: int, data) -> "Summary":
        """A summary from dump(); ValueError (or TypeError) for anything else."""
        floor, rows = data
        summary = cls(keep)
        if rows:
            if set(map(len, rows)) != {4}:
                raise ValueError("a summary row is [key, estimate, requests, bytes]")
            keys, estimates, requests, nbytes = zip(*rows)
            if not all(map(isinstance, keys, repeat(str))):
                raise ValueError("a summary key must be text")
            keys = tuple(map(sys.intern, keys))
            accumulate(summary.estimates, keys, map(int, estimates))
            accumulate(summary.requests, keys, map(int, requests))
            accumulate(summary.bytes, keys, map(int, nbytes))
        summary.floor = int(floor)
        if len(summary.estimates) > 2 * keep:
            summary._prune()
        return summary
