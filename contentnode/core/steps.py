"""Timed step reports: the checks that tell an operator which step failed.

Bucket checks, domain checks, certificate preflights and traffic diagnosis
all answer a list of steps, each {"name", "ok", "detail", "ms"} (plus any
extra fields such as an error "code"), so the panel shows them one way.
"""

import time
from dataclasses import dataclass, field


def elapsed_ms(started: float) -> float:
    """Milliseconds since `started` (a time.monotonic() value), to 0.1 ms."""
    return round((time.monotonic() - started) * 1000, 1)


@dataclass
class Steps:
    """The steps of a check, timed; `ok` once there are steps and every one passed."""

    items: list = field(default_factory=list)

    def add(self, name: str, ok, detail: str, started: float, **extra):
        """Record one step begun at `started`; returns `ok` so callers can stop on failure."""
        self.items.append({"name": name, "ok": bool(ok), "detail": detail, **extra, "ms": elapsed_ms(started)})
        return ok

    @property
    def ok(self) -> bool:
        return bool(self.items) and all(step["ok"] for step in self.items)

    def report(self) -> dict:
        return {"ok": self.ok, "steps": self.items}
