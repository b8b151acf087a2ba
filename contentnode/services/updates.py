"""The update check: is a newer version out? It only tells; nothing is downloaded or installed.

POST /api/update/check runs it at once (api/updates.py); with auto_check on,
its background job checks once a day (and right after auto_check is switched
on) and raises update_available once per new version.
"""

import logging
import threading

from contentnode import __version__, clock
from contentnode.core import settings, updates

log = logging.getLogger("contentnode.updates")
DAY = 86400
WAKE_SECONDS = 600   # how often the job looks whether a check is due


class UpdateCheck:
    """The check and its daily job. `public_key_path`: the update_public_key start-up value, or ""
    for the key shipped with the package; outbound(): the outbound policy of the moment."""

    def __init__(self, store, clock, events, outbound, public_key_path: str):
        self.store, self.clock, self.events = store, clock, events
        self._outbound, self._public_key_path = outbound, public_key_path
        self._kick = threading.Event()
        self._stopping = threading.Event()

    def _public_key(self):
        configured = self._public_key_path
        return updates.load_public_key(configured) if configured else updates.shipped_public_key()

    def run(self) -> dict:
        """Check now, remember the outcome, raise update_available once per new version."""
        cfg = settings.effective(self.store.data)["updates"]
        try:
            key = self._public_key()
        except ValueError as exc:
            raise updates.UpdateError(f"the configured update key is unusable: {exc}") from None
        try:
            result = updates.check(cfg["url"], cfg["channel"], __version__, key, self._outbound())
        except updates.UpdateError as exc:
            with self.store.transaction() as doc:
                doc["update_status"].update(error=str(exc), checked_at=clock.rfc3339(self.clock.now()))
            raise
        result["checked_at"] = clock.rfc3339(self.clock.now())
        with self.store.transaction() as doc:
            status = doc["update_status"]
            notify = result["available"] and status.get("notified_version") != result["latest"]
            status.update(result, error=None)
            if notify:
                status["notified_version"] = result["latest"]
        if notify:
            self.events.emit("update_available", current=result["current"], latest=result["latest"],
                             channel=result["channel"], notes=result["notes"])
        return result

    def kick(self) -> None:
        """Look at once whether a check is due (auto_check was just switched on)."""
        self._kick.set()

    def _due(self) -> bool:
        cfg = settings.effective(self.store.data)["updates"]
        if not (cfg["auto_check"] and cfg["url"]):
            return False
        last = self.store.data["update_status"].get("checked_at")
        return last is None or self.clock.now() - clock.parse_rfc3339(last) >= DAY

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._kick.wait(WAKE_SECONDS)
            self._kick.clear()
            if self._stopping.is_set() or not self._due():
                continue
            try:
                self.run()
            except updates.UpdateError as exc:
                log.warning("automatic update check failed: %s", exc)
            except Exception:
                log.exception("automatic update check failed")

    def start(self) -> None:
        threading.Thread(target=self._loop, name="update-check", daemon=True).start()
        self._kick.set()

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()
