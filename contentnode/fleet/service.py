"""The fleet service: this node's role, its one background job, and what the
rest of the node hears from it (the route guard, readiness, the listeners).

Built once in the composition root (contentnode/app.py) and handed down; the
store's commit listener and the cache's purge listener are its only hooks
into the rest of the node. One thread does everything the role needs, every
fleet_poll_seconds: on the primary a conditional GET of bundle.json and publish
(after a change, debounced: 0.3 s of quiet, at most 2 s after the first change,
or over a bundle.json it did not write), status, the nodes' statuses every third
poll and expired join objects; on a replica the conditional GET and status. While a join code is valid the
primary reads the statuses and join claims every poll, so a new node shows at once and its
code is marked used (fleet/joinclaims.py).
Bucket failures back off (poll x 2^n, at most 8 polls or 5 minutes). A replica that joined
and is not listed by the primary yet polls every second until it is.
"""

import logging
import os
import threading
import time

from contentnode.clock import rfc3339
from contentnode.core import readiness
from contentnode.core.certs import CertStore
from contentnode.core.fleet_section import FLEET, SECTION, state_of
from contentnode.core.folders import FolderRoots
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.s3 import S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.core.s3_records import BucketConfig
from contentnode.fleet import (alerts, folders, follower, issuer, joinclaims, joincode, keys, members, promotion,
                              publisher, roster, shared, status)
from contentnode.fleet.wire import Refused

log = logging.getLogger("contentnode.fleet")

QUIET_SECONDS, MAX_SETTLE_SECONDS = 0.3, 2.0
STATUS_READ_EVERY = 3        # polls between the primary's reads of the nodes' statuses
BACKOFF_MAX_POLLS, BACKOFF_MAX_SECONDS = 8, 300
BUCKET_TIMEOUT = 10.0
BUCKET_ERROR = "bucket_error"
PENDING_POLL_SECONDS = 1.0   # a joined node not listed yet polls this often (conditional GETs)


def ready(doc: dict) -> bool:
    """Whether the public side may report healthy: a replica that never applied a bundle is not
    (core/readiness.py, the rule the public /healthz stage asks in every process)."""
    return not readiness.not_ready(doc)


def view_of(doc: dict, poll_seconds: int, nodes: list, bundle_seen_at: str | None, unknown: int = 0) -> dict:
    """GET /api/fleet's answer (and `contentnode fleet status`'s): the role and what this node
    knows of the fleet, never a key."""
    state = state_of(doc)
    role = state["role"]
    out = {"role": role, "node_id": doc["node"]["id"], "fleet_id": state.get("fleet_id"), "seq": state.get("seq"),
           "bucket": state.get("bucket"), "applied_at": state.get("applied_at"),
           "last_error": state.get("last_error"), "poll_seconds": poll_seconds,
           "key_epoch": (state.get("pin") or {}).get("epoch"), "expires_at": state.get("expires_at"),
           "nodes": nodes if role == "primary" else [], "primary": None,
           "unknown_statuses": unknown if role == "primary" else 0,
           "probe": state.get("probe"), "issuer": issuer.mode(state), "demoted": state.get("demoted"),
           "removed": state.get("removed"), "members": len(state.get("members") or {})}
    if role == "replica":
        out["primary"] = {"node_id": state.get("primary"), "bundle_seen_at": bundle_seen_at,
                          "name": None, "address": None}
    return out


def primary_label(node_id: str | None, seen: dict | None) -> str:
    """How a replica names its primary to people: name and address from the primary's own status
    when read, with the node id; the id alone before."""
    if not node_id:
        return "unknown (no bundle applied yet)"
    if not seen or seen.get("node_id") != node_id or not seen.get("name"):
        return f"node {node_id}"
    where = f" at {seen['address']}" if seen.get("address") else ""
    return f"{seen['name']}{where} (node {node_id})"


class Fleet:
    """See the module docstring. `outbound` gives the current OutboundPolicy, `counters` the
    traffic totals a status reports; `purger` (the cache) and `events` may be None offline."""

    def __init__(self, *, store, data_dir: str, clock, poll_seconds: int, version: str,
                 outbound=OutboundPolicy, node_name=lambda: "contentnode", counters=dict,
                 purger=None, events=None, folder_roots: FolderRoots | None = None, address=lambda: None):
        self.store, self.data_dir, self.clock = store, data_dir, clock
        self.folder_roots = folder_roots   # this node's: a shared folder bucket must lie in them here too
        self.poll_seconds, self.version = poll_seconds, version
        self.outbound, self.node_name, self.counters = outbound, node_name, counters
        self.purger, self.events = purger, events
        self.address = address           # where people reach this node (its status says, for the panel)
        self.primary_seen: dict | None = None   # a replica's last read of its primary's status
        self.certs = CertStore(os.path.join(data_dir, "certs"))  # the files the bundle carries (fleet/certfiles.py)
        self.nodes: list = []            # the primary's latest view of the other nodes
        self.removed_since_read: set = set()   # node ids removed while the statuses were read (fleet/roster.py)
        self.unknown_statuses = 0        # ... and how many statuses it ignored (no valid mac, too large, ...)
        self.bundle_seen_at: str | None = None
        self._secrets_cache: keys.Secrets | None = None
        self._member_cache: members.MemberKeys | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._first_change = self._last_change = 0.0
        self._changed = False
        self._unpublished = True         # a shared change not published yet (at start: look once)
        self._thread: threading.Thread | None = None
        self._incidents: set = set()
        self.lock = threading.Lock()    # one enrolment change or publish at a time

    # --- what the node asks ------------------------------------------------

    def state(self) -> dict:
        return state_of(self.store.data)

    def view(self) -> dict:
        buckets = self.store.data["buckets"]
        nodes = [dict(row, cannot_take=folders.refusals(buckets, row)) for row in self.nodes]
        out = view_of(self.store.data, self.poll_seconds, nodes, self.bundle_seen_at, self.unknown_statuses)
        seen = self.primary_seen
        if out["primary"] is not None and seen is not None and seen.get("node_id") == out["primary"]["node_id"]:
            out["primary"].update(name=seen.get("name"), address=seen.get("address"))
        return out

    def folder_warnings(self) -> list:
        """On the primary: the replicas it knows that will refuse its current buckets, and why."""
        if self.state().get("role") != "primary":
            return []
        return folders.warnings(self.store.data["buckets"], self.nodes)

    def node_id(self) -> str:
        return self.store.data["node"]["id"]

    def primary_of_replica(self) -> str | None:
        """How to name the primary when this node is a replica (shared writes are refused), else None."""
        state = self.state()
        if state.get("role") != "replica":
            return None
        return primary_label(state.get("primary"), self.primary_seen)

    def secrets(self) -> keys.Secrets | None:
        if self._secrets_cache is None:
            self._secrets_cache = keys.load(self.data_dir)
        return self._secrets_cache

    def forget_secrets(self) -> None:
        self._secrets_cache = None
        self._member_cache = None

    def member(self) -> members.MemberKeys | None:
        """This node's own member keys (fleet/members.py), None before it inits or joins."""
        if self._member_cache is None:
            self._member_cache = members.load(self.data_dir)
        return self._member_cache

    def authority(self, purpose: str) -> members.Authority:
        """How this node signs its statuses or leases and judges the others' (fleet/members.py)."""
        state, secrets_ = self.state(), self.secrets()
        known = {node_id: row.get("sign") for node_id, row in (state.get("members") or {}).items()}
        return members.Authority(self.member(), secrets_.fleet_key if secrets_ is not None else None, purpose,
                                 known, state.get("sealing_id") in (None, members.LEGACY))

    def client(self, bucket: dict | None = None, secrets_: keys.Secrets | None = None) -> S3Client:
        bucket = bucket or self.state()["bucket"]
        secrets_ = secrets_ or self.secrets()
        if secrets_ is None:
            raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
        config = BucketConfig(bucket["endpoint"], bucket["region"], bucket["bucket"], secrets_.access_key,
                              secrets_.secret_key, bool(bucket.get("path_style")))
        return S3Client(config, self.outbound(), timeout=BUCKET_TIMEOUT, clock=self.clock.now)

    def record(self, **fields) -> None:
        """Change members of the fleet section (one durable transaction)."""
        with self.store.transaction() as doc:
            state = dict(doc.get(SECTION) or FLEET.defaults())
            state.update(fields)
            doc[SECTION] = state

    # --- listeners -----------------------------------------------------------

    def on_commit(self, names: frozenset) -> None:
        """The store committed: on the primary, a change of what is shared schedules a bundle."""
        if names & shared.WATCHED and self.state().get("role") == "primary":
            now = time.monotonic()
            if not self._changed:
                self._first_change = now
            self._last_change, self._changed, self._unpublished = now, True, True
            self._wake.set()

    def on_purge(self, entries: list) -> None:
        """A purge on the primary goes into the purge history, which the bundle carries."""
        if self.state().get("role") != "primary":
            return
        with self.store.transaction() as doc:
            doc[shared.PURGES] = shared.record_purges(doc.get(shared.PURGES), rfc3339(self.clock.now()), entries)

    def run_purges(self, items: list, everything: bool) -> None:
        """Replay the primary's purges on this node's cache."""
        if self.purger is None:
            return
        if everything:
            self.purger.purge_all()
            return
        named = [i for i in items if isinstance(i.get("host"), str) and isinstance(i.get("value"), str)]
        if any(i.get("kind") == "all" for i in items):
            self.purger.purge_all()
            return
        urls = [(i["host"], i["value"]) for i in named if i.get("kind") == "url"]
        if urls:
            self.purger.purge_urls(urls)
        for item in named:
            if item.get("kind") == "prefix":
                self.purger.purge_prefix(item["host"], item["value"])

    # --- incidents -----------------------------------------------------------

    def _fail(self, code: str, message: str, **changes) -> None:
        """Record last_error (with `changes`, in the same write); notify when an incident
        starts (no error before, or another code)."""
        previous = self.state().get("last_error") or {}
        if previous.get("code") == code and previous.get("message") == message:
            if changes:
                self.record(**changes)
            return
        self.record(last_error={"code": code, "message": message, "at": rfc3339(self.clock.now())}, **changes)
        log.warning("fleet: %s: %s", code, message)
        if self.events is not None and previous.get("code") != code:
            self.events.emit("fleet_sync_failed", node=self.node_id(), code=code, message=message,
                             seq=self.state().get("seq"))

    def no_longer_member(self, exc: Refused) -> None:
        """The primary took this node off the member list: say so once (state, log line, event);
        it keeps serving what it applied last, applies nothing more and writes no status."""
        if not self.state().get("removed"):
            log.warning("fleet: this node is no longer a member of fleet %s: %s", self.state().get("fleet_id"),
                        exc.message)
        removed = self.state().get("removed") or {"at": rfc3339(self.clock.now()), "message": exc.message}
        self._fail(exc.code, exc.message, removed=removed)

    def refused(self, exc: Refused) -> None:
        self._fail(exc.code, exc.message)

    def bucket_failed(self, exc: S3Error) -> None:
        self._fail(BUCKET_ERROR, f"the bucket failed: {exc.message}")

    def _recovered(self) -> None:
        if (self.state().get("last_error") or {}).get("code") == BUCKET_ERROR:
            self.record(last_error=None)

    def record_seen(self) -> None:
        self.bundle_seen_at = rfc3339(self.clock.now())

    def demote(self, message: str) -> None:
        """Stop publishing for good: become a replica pinned to this node's own key."""
        keys.remove_signing(self.data_dir)
        self.forget_secrets()
        # one write: whoever sees the replica role also sees why; `demoted` stays after the
        # next good apply clears last_error, until the node leaves or is promoted again
        self._fail("demoted", message, role="replica", primary=None, bundle_etag=None,
                   demoted={"at": rfc3339(self.clock.now()), "message": message})

    # --- the background job ----------------------------------------------------

    def start(self) -> None:
        promotion.finish_rotation(self.data_dir, self.state())
        self._upgraded_member_keys()
        thread = self._thread = threading.Thread(target=self._run, name="fleet", daemon=True)
        thread.start()

    def _upgraded_member_keys(self) -> None:
        """A replica that joined under a build from before member lists holds the fleet key and no
        member keys: it makes them now, so its status carries them (beside the older MAC) and an
        upgraded primary adopts it before its first rotation (docs/API.md, Fleet: upgrading)."""
        secrets_ = self.secrets()
        if self.state().get("role") == "replica" and secrets_ is not None and secrets_.fleet_key is not None \
                and self.member() is None:
            members.make(self.data_dir)
            self.forget_secrets()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(BUCKET_TIMEOUT + 5)

    def republish(self) -> None:
        """Publish at the next poll though nothing shared changed (a new signing key)."""
        self._unpublished = True
        self._wake.set()

    def kick(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        failures, polls, etag = 0, 0, None
        next_status = 0.0
        membership = None
        while not self._stop.is_set():
            started = time.monotonic()
            delay = float(self.poll_seconds)
            state = self.state()
            role = state.get("role")
            # the ETag belongs to one membership: after a leave and a join (even within one poll)
            # or a demotion, a 304 for the previous one's bundle would leave the node unapplied
            if (role, state.get("membership")) != membership:
                membership, etag, polls = (role, state.get("membership")), None, 0
            try:
                if role == "primary":
                    self._publish_if_due()
                elif role == "replica":
                    with self.lock:
                        outcome, etag = follower.poll(self, etag)
                    if outcome == "applied":
                        next_status = 0.0   # the primary sees the new seq now, not a poll later
                    if (self.state().get("last_error") or {}).get("code") == members.PENDING:
                        delay = min(delay, PENDING_POLL_SECONDS)   # joined: look again soon (304s until listed)
                if role in ("primary", "replica") and time.monotonic() >= next_status:
                    polls += 1
                    self._status_round(role, polls)
                    next_status = time.monotonic() + self.poll_seconds - 0.05
                failures = 0
                self._recovered()
            except S3Error as exc:
                failures += 1
                self.bucket_failed(exc)
                delay = min(self.poll_seconds * 2 ** failures, self.poll_seconds * BACKOFF_MAX_POLLS,
                            BACKOFF_MAX_SECONDS)
            except Refused as exc:
                self.refused(exc)
            except Exception:
                log.exception("fleet job failed")
            self._wake.wait(max(0.0, delay - (time.monotonic() - started)))  # a poll every delay, work included
            self._wake.clear()

    def _publish_if_due(self) -> None:
        """Publish after a change (debounced), when re-signing is due, or when bundle.json is no
        longer the object this node wrote; an idle primary sends one conditional GET (a 304)
        and does not even hash its configuration."""
        self._settle()
        if not self._unpublished and not publisher.resign_due(self.state(), self.clock.now()):
            with self.lock:
                if publisher.bundle_intact(self):
                    return
        self._unpublished = False
        try:
            with self.lock:
                publisher.publish(self)
        except BaseException:
            self._unpublished = True
            raise

    def _settle(self) -> None:
        """After a change, wait for 0.3 s of quiet (at most 2 s): a burst of edits is one bundle."""
        if not self._changed:
            return
        while not self._stop.is_set():
            now = time.monotonic()
            left = min(self._last_change + QUIET_SECONDS, self._first_change + MAX_SETTLE_SECONDS) - now
            if left <= 0:
                break
            self._stop.wait(left)
        self._changed = False

    def _status_round(self, role: str, polls: int) -> None:
        with self.lock:   # a leave in between writes the last status: this one must not replace it
            state = self.state()
            if state.get("role") != role or state.get("removed"):
                return   # left, demoted or no longer a member: nothing it writes would be read
            client, key = self.client(), self.authority("status")
            status.write(client, state["bucket"]["prefix"], self.status_doc(), key)
        if role == "replica" and state.get("primary"):
            self.primary_seen = status.read_one(client, state["bucket"]["prefix"], state["primary"], key)
        if role == "primary" and (polls % STATUS_READ_EVERY == 1 or self._joins_open()):
            # leaves before claims: a node that left and joins again within one poll is removed
            # first, so its claim is not one for a listed member's id (fleet/joinclaims.py)
            found, unknown = self._read_statuses(client)
            used = joinclaims.collect(client, state["bucket"]["prefix"], self.state().get("join_codes") or [],
                                      self.clock.now())
            if used:
                with self.lock:
                    added = joinclaims.mark_used(self, client, used)
                if added:   # read again: a node that just joined is listed at this poll
                    found, unknown = self._read_statuses(client)
            self._show_nodes(found, unknown)
            publisher.delete_expired_joins(self, client)

    def _joins_open(self) -> bool:
        """An unused join code is still valid: read the statuses and claims every poll, so a node
        that joins shows, and its code is marked used, at the primary's first poll after it."""
        codes = [c for c in self.state().get("join_codes") or [] if not c.get("used_at")]
        return len(joincode.expired_ids(codes, self.clock.now())) < len(codes)

    def status_doc(self) -> dict:
        state = self.state()
        return {"node_id": self.node_id(), "name": self.node_name(), "role": state.get("role"),
                "version": self.version, "seq": state.get("seq"), "applied_at": state.get("applied_at"),
                "last_error": state.get("last_error"), "seen_at": rfc3339(self.clock.now()),
                "poll_seconds": self.poll_seconds,
                "health": {"ready": ready(self.store.data), "bundle_seen_at": self.bundle_seen_at},
                "traffic": self.counters(),
                "certificates": alerts.certificates_due(self.store.data["domains"], self.clock.now()),
                "folder_roots": list(self.folder_roots.roots) if self.folder_roots is not None else None,
                "address": self.address(),
                "member_keys": member.public() if (member := self.member()) is not None else None}

    def _read_statuses(self, client) -> tuple[list, int]:
        """(the other nodes' statuses, how many were unknown), after acting on the leaves among them."""
        with self.lock:
            self.removed_since_read = set()
        found, unknown, error = status.read_all(client, self.state()["bucket"]["prefix"], self.node_id(),
                                                self.authority("status"))
        if error is not None:
            raise S3Error(BUCKET_ERROR, error)
        return roster.settle(self, client, found), unknown

    def _show_nodes(self, found: list, unknown: int) -> None:
        state = self.state()
        self.unknown_statuses = unknown
        now = self.clock.now()
        nodes = status.view(found, int(state.get("seq") or 0), self.version, self.poll_seconds, now)
        alerts.annotate(nodes, self.store.data["domains"], state.get("issued_at"), self.poll_seconds, now)
        with self.lock:   # a node removed since its status was read stays gone (roster.remove)
            self.nodes = [row for row in nodes if row["node_id"] not in self.removed_since_read]
        current = {(row["node_id"], problem) for row in self.nodes for problem in alerts.problems(row)}
        started = sorted(current - self._incidents)
        if started and self.events is not None:   # one message for every incident this round started
            self.events.emit("fleet_node_problem", **alerts.summary(self.nodes, started))
        self._incidents = current
