"""A tiny in-process event bus: areas emit, the notifier (and tests via logs) listen.

Emitting never blocks and never fails the caller: a subscriber that raises is
logged and skipped.
"""

import logging
import threading

log = logging.getLogger("contentnode.events")

# Every event there is: name -> (subject, body) of its notification. Missing fields print as "?".
EVENTS = {
    "cert_expiring": ("Certificate for {host} expires in {days_left} days",
                      "The certificate for {host} expires in {days_left} days. "
                      "Check automatic renewal or upload a new one."),
    "cert_renewal_failed": ("Certificate renewal failed for {host}",
                            "Renewing the certificate for {host} failed (attempt {attempts}, "
                            "next try in {retry_in_seconds} s): {error}"),
    "domain_check_failed": ("Domain check failed for {host}",
                            "The check of {host} failed at step {step}: {detail}"),
    "bucket_check_failed": ("Bucket check failed for {name}",
                            "The check of bucket {name} ({id}) failed at step {step}: {detail}"),
    "login_failures_burst": ("Burst of failed logins",
                             "Logins were locked for {key} after repeated failures (last from {ip})."),
    "admin_login_new_address": ("Administrator login from a new address",
                                "User {username} logged in from {ip}, an address not seen before for this user."),
    "backup_restored": ("Backup restored",
                        "A backup ({kind}, created {created_at}) was restored by {by}."),
    "backup_failed": ("Scheduled backup failed",
                      "The scheduled backup to {target} failed: {error}\nNext try: {next_try}. "
                      "Until a run succeeds, further failures are shown in the panel but not sent again."),
    "update_available": ("Update available: contentnode {latest}",
                         "contentnode {latest} is available on the {channel} channel (running {current}).\n{notes}"),
    "fleet_sync_failed": ("Fleet: node {node} cannot follow the fleet",
                          "Node {node}: {code}: {message}. It keeps serving its last applied configuration "
                          "(seq {seq}) and retries."),
    "fleet_probe_failed": ("Fleet: node {node}'s bucket ignores conditional writes",
                           "Node {node}: the capability probe failed at {check}: {detail}. No issuer lease is "
                           "used: the primary stays the fleet's only issuer."),
    "fleet_node_problem": ("Fleet: {count} node(s) need attention ({problems})",
                           "Nodes {node_ids}:\n{summary}\nGET /api/fleet (or the Fleet page) shows each node."),
    "user_created": ("User created: {username}", "User {username} (role {role}) was created by {by}."),
    "user_deleted": ("User deleted: {username}", "User {username} was deleted by {by}."),
}


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
