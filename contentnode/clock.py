"""The daemon's one clock, and RFC 3339 helpers.

Everything that compares times (sessions, lockouts, links, certificates) asks
the App's Clock, so tests can move time without sleeping: a Clock built with
an offset file adds that file's content (a number of seconds) to the real
time. The composition root builds it (Clock.from_environment reads
CONTENTNODE_TEST_CLOCK_FILE there, not at import); production never sets it.
"""

import os
import time
from datetime import datetime
from typing import overload

CLOCK_FILE_VARIABLE = "CONTENTNODE_TEST_CLOCK_FILE"


class Clock:
    """Real time, shifted by the number in `offset_file` when one is given."""

    def __init__(self, offset_file: str | None = None):
        self.offset_file = offset_file

    @classmethod
    def from_environment(cls, environ=os.environ) -> "Clock":
        return cls(environ.get(CLOCK_FILE_VARIABLE) or None)

    def _offset(self, offset_file: str) -> float:
        """Read on every call: only tests set the file, and they change it at will."""
        try:
            with open(offset_file, encoding="ascii") as f:
                return float(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def now(self) -> float:
        """Seconds since the epoch, shifted by the test offset when one is configured."""
        if self.offset_file:
            return time.time() + self._offset(self.offset_file)
        return time.time()


@overload
def rfc3339(ts: float) -> str: ...


@overload
def rfc3339(ts: None) -> None: ...


def rfc3339(ts: float | None) -> str | None:
    """RFC 3339 UTC with a Z suffix and whole seconds, or None."""
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def parse_rfc3339(text: str) -> float:
    """Parse an RFC 3339 time (Z or offset) into epoch seconds; ValueError when malformed."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("time zone missing")
    return value.timestamp()
