"""A tiny in-process event bus: areas emit, the notifier (and tests via logs) listen.

Emitting never blocks and never fails the caller: a subscriber that raises is
logged and skipped.
"""

import logging
import threading

log = logging.getLogger("contentnode.events")

EVENTS = (
    "cert_expiring", "cert_renewal_failed", "domain_check_failed", "bucket_check_failed",
    "login_failures_burst", "admin_login_new_address", "backup_restored", "update_available",
    "user_created", "user_deleted",
)


class EventBus:
    def __init__(self):
        self._subscribers = []
        self._lock = threading.Lock()

    def subscribe(self, callback) -> None:
        """callback(name, fields) runs in the emitter's thread: it must only enqueue."""
        with self._lock:
            self._subscribers.append(callback)

    def emit(self, name: str, /, **fields) -> None:
        if name not in EVENTS:
            raise ValueError(f"unknown event {name!r}")
        log.info("event %s %s", name, fields)
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(name, fields)
            except Exception:
                log.exception("event subscriber failed for %s", name)
