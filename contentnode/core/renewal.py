"""Keeping certificates alive: renew ACME ones ahead of expiry, warn about all.

A certificate the node issued is renewed once it has 30 days or less left; a
failure backs off (1 h, doubling, at most 24 h) so a broken DNS record does not
hammer the CA, and is reported as `cert_renewal_failed`. Every certificate,
uploaded ones included, raises `cert_expiring` once when it crosses 14 and 3
days left. The bookkeeping is in memory: after a restart a warning may be
repeated once and backoff starts over, which errs on the side of telling.
"""

import threading

DAY = 86400
RENEW_BEFORE = 30 * DAY
WARN_DAYS = (14, 3)
FIRST_BACKOFF = 3600
MAX_BACKOFF = DAY


class Renewer:
    """One pass per `run_once(now)`; the daemon calls it from a background thread.

    certificates(): iterable of (host, not_after_epoch, renewable)
    renew(host): issues a new certificate for host, raises on failure
    emit(name, **fields): the event bus
    """

    def __init__(self, certificates, renew, emit):
        self._certificates = certificates
        self._renew = renew
        self._emit = emit
        self._failures = {}  # host -> (count, next attempt epoch)
        self._warned = set()  # (host, not_after, days)
        self._lock = threading.Lock()

    def backoff(self, failures: int) -> int:
        return min(FIRST_BACKOFF * 2 ** (failures - 1), MAX_BACKOFF)

    def run_once(self, now: float) -> list:
        """Renew what is due, warn what is close; returns [(host, outcome), ...]."""
        with self._lock:
            outcomes = []
            for host, not_after, renewable in list(self._certificates()):
                left = not_after - now
                self._warn(host, not_after, left)
                if renewable and left <= RENEW_BEFORE:
                    outcomes.append((host, self._attempt(host, now)))
            return outcomes

    def _warn(self, host, not_after, left):
        for days in WARN_DAYS:
            key = (host, not_after, days)
            if left <= days * DAY and key not in self._warned:
                self._warned.add(key)
                if days == min(d for d in WARN_DAYS if left <= d * DAY):
                    self._emit("cert_expiring", host=host, days_left=max(0, int(left // DAY)),
                               expired=left <= 0)

    def _attempt(self, host, now) -> str:
        count, next_at = self._failures.get(host, (0, 0))
        if now < next_at:
            return "waiting"
        try:
            self._renew(host)
        except Exception as exc:  # any failure must back off, never kill the job
            count += 1
            wait = self.backoff(count)
            self._failures[host] = (count, now + wait)
            self._emit("cert_renewal_failed", host=host, error=str(exc)[:300], attempts=count,
                       retry_in_seconds=wait)
            return "failed"
        self._failures.pop(host, None)
        return "renewed"
