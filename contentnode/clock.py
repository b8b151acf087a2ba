"""The daemon's one clock.

Everything that compares times (sessions, lockouts, links, certificates) asks
`now()`, so tests can move time without sleeping: when the environment variable
CONTENTNODE_TEST_CLOCK_FILE names a file, its content (a number of seconds) is
added to the real time. Production never sets it.
"""

import os
import time
from datetime import datetime

_CLOCK_FILE = os.environ.get("CONTENTNODE_TEST_CLOCK_FILE")


def _offset() -> float:
    """Read on every call: only tests set the file, and they change it at will."""
    try:
        with open(_CLOCK_FILE, encoding="ascii") as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0


def now() -> float:
    """Seconds since the epoch, shifted by the test offset when one is configured."""
    if _CLOCK_FILE:
        return time.time() + _offset()
    return time.time()


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
