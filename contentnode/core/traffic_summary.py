"""A bounded top-K summary (Space-Saving with batched eviction) of requests and bytes by key.

The top paths or clients of a domain must be found without holding every
distinct path or client, which anonymous clients choose. A Summary holds at
most 2 * keep keys; when a new key arrives at that size, it keeps the `keep`
keys with the largest estimates and remembers the largest estimate it dropped
as its floor. A new key starts at the floor (it may have been dropped before
with that many requests), so a key seen more often than
(requests / keep) stays in the summary whatever else arrives. Each key keeps
two counts: the estimate (which decides what is kept) and what it was seen
doing since it last entered (what the API shows). While no key was ever
dropped (floor 0) both are exact.
"""

import sys

ROW = 3   # estimate, requests seen, bytes seen


class Summary:
    __slots__ = ("keep", "floor", "rows")

    def __init__(self, keep: int):
        self.keep = keep
        self.floor = 0
        self.rows: dict[str, list] = {}

    def add(self, key: str, requests: int, nbytes: int, estimate: int | None = None) -> None:
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= 2 * self.keep:
                self._prune()
            self.rows[sys.intern(key)] = [self.floor + (requests if estimate is None else estimate),
                                          requests, nbytes]
            return
        row[0] += requests if estimate is None else estimate
        row[1] += requests
        row[2] += nbytes

    def _prune(self) -> None:
        ranked = sorted(self.rows.items(), key=lambda item: item[1][0], reverse=True)
        self.floor = max(self.floor, ranked[self.keep][1][0])
        self.rows = dict(ranked[:self.keep])

    def merge(self, other: "Summary") -> None:
        """Add another summary's counts (another worker's, or another minute's)."""
        for key, (estimate, requests, nbytes) in other.rows.items():
            self.add(key, requests, nbytes, estimate)
        self.floor += other.floor

    def top(self, count: int) -> list:
        """[(key, requests, bytes)] of the `count` keys seen most, most first (ties by key)."""
        ranked = sorted(self.rows.items(), key=lambda item: (-item[1][1], item[0]))
        return [(key, row[1], row[2]) for key, row in ranked[:count]]

    @property
    def approximate(self) -> bool:
        return self.floor > 0

    # a summary crosses the workers' pipe and the disk as [floor, [[key, estimate, requests, bytes], ...]]

    def dump(self) -> list:
        return [self.floor, [[key, *row] for key, row in self.rows.items()]]

    @classmethod
    def load(cls, keep: int, data) -> "Summary":
        """A summary from dump(); ValueError (or TypeError) for anything else."""
        floor, rows = data
        summary = cls(keep)
        for key, estimate, requests, nbytes in rows:
            if not isinstance(key, str):
                raise ValueError("a summary key must be text")
            summary.add(key, int(requests), int(nbytes), int(estimate))
        summary.floor = int(floor)
        return summary
