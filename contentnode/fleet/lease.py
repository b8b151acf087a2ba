"""The issuer lease: at most one node of a fleet orders a given certificate at a time.

Two nodes ordering the same name present two different challenge answers and
spend the CA's rate limit twice. Where the bucket honours conditional writes
(fleet/probe.py says so), the issuer holds `<prefix>leases/<name>.json`:

- taken with `If-None-Match: *` (the object must not exist);
- refreshed while the order runs with `If-Match` on the ETag it holds;
- taken over only when stale, with `If-Match` on the stale object's ETag, so
  of two nodes taking over the same stale lease exactly one succeeds;
- released with a delete conditional on the ETag it holds.

A 412 or a 409 from any of these is a lost race. Staleness is judged by the
bucket's clock alone: the age of a lease is the Date of the bucket's answer
minus the Last-Modified of the object in that same answer, never the local
clock, so nodes whose clocks disagree still agree on when a lease expired.
A holder that cannot refresh for a whole TTL counts its lease as lost too.

A lease is signed by its holder's member key (fleet/members.py Authority;
a MAC under the fleet key in a fleet without member lists yet): one not
signed by a listed member (a bucket writer's forgery, a removed node's) is
read as garbage, so stale, and taken over at once; its text never reaches
an answer or a log line.
"""

import logging
import re
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from contentnode.core.s3 import S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.core.text import http_date
from contentnode.fleet.probe import refused
from contentnode.fleet.wire import loads

log = logging.getLogger("contentnode.fleet.lease")

DEFAULT_TTL = 120  # seconds; an ACME order takes a few seconds, a slow CA a minute
MAX_TTL = 3600  # a lease object claiming more is treated as claiming this much
LEASE_MAX_BYTES = 4096
ACQUIRE_ROUNDS = 3
CONTENT_TYPE = "application/json"


class LeaseHeld(Exception):
    """Another holder has the lease (or won the race for it); `holder` names it when known."""

    def __init__(self, name: str, holder: str | None, expires_in: float | None, message: str):
        super().__init__(message)
        self.name, self.holder, self.expires_in, self.message = name, holder, expires_in, message


@dataclass
class Lease:
    """A lease this node holds: the object's ETag is the proof, `lost` is set once it is gone."""

    name: str
    key: str
    token: str
    etag: str
    refreshed_at: float  # time.monotonic() of the last successful write
    lost: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Seen:
    """A lease object as the bucket showed it, with its age by the bucket's clock."""

    etag: str
    holder: str | None
    age: float
    ttl: float

    @property
    def stale(self) -> bool:
        return self.ttl <= 0 or self.age > self.ttl   # no ttl: garbage or a forgery, stale at once


_HOLDER = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _parse(body: bytes, authority) -> dict:
    """The lease's members when it is a lease a fleet member wrote (signed by its holder, a plain
    holder name), else {}: a lease a bucket writer forged reads as garbage, so stale."""
    try:
        doc = loads(body)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or not authority.valid(doc, doc.get("holder")):
        return {}
    return doc if isinstance(doc.get("holder"), str) and _HOLDER.fullmatch(doc["holder"]) else {}


class IssuerLeases:
    """Leases under `<prefix>leases/` held in the name of `holder` (the node id), written and judged
    by `authority` (members.Authority): one its holder did not sign counts as stale."""

    def __init__(self, client: S3Client, prefix: str, holder: str, authority, ttl: float = DEFAULT_TTL):
        self.client, self.prefix, self.holder, self.ttl = client, prefix, holder, ttl
        self.authority = authority

    def key(self, name: str) -> str:
        return f"{self.prefix}leases/{name}.json"

    def _body(self, token: str) -> bytes:
        return self.authority.write({"holder": self.holder, "token": token, "ttl_seconds": self.ttl})

    def read(self, name: str) -> Seen | None:
        """The lease object as it stands, or None when there is none."""
        try:
            with self.client.get_object(self.key(name), max_bytes=LEASE_MAX_BYTES) as stream:
                info = stream.info
                body = b"".join(stream.chunks())
        except S3Error as exc:
            if exc.code == "no_such_key":
                return None
            raise
        doc = _parse(body, self.authority)
        said, modified = http_date(info.headers.get("date")), http_date(info.last_modified)
        if said is None or modified is None:
            # no clock to judge by: never stale, so never taken over (the probe refuses such buckets)
            age = 0.0
        else:
            age = said - modified
        ttl = doc.get("ttl_seconds")
        ttl = min(float(ttl), MAX_TTL) if isinstance(ttl, (int, float)) and ttl > 0 else 0.0  # garbage: stale
        holder = doc.get("holder") if isinstance(doc.get("holder"), str) else None
        return Seen(info.etag or "", holder, age, ttl)

    def acquire(self, name: str) -> Lease:
        """Create the lease, or take it over when stale; LeaseHeld when another holder has it."""
        token = secrets.token_hex(16)
        body = self._body(token)
        for _ in range(ACQUIRE_ROUNDS):
            try:
                etag = self.client.put_object(self.key(name), body, CONTENT_TYPE, {"if-none-match": "*"})
                return Lease(name, self.key(name), token, etag or "", time.monotonic())
            except S3Error as exc:
                if not refused(exc):
                    raise
            seen = self.read(name)
            if seen is None:
                continue  # released between our create and our read: create again
            if not seen.stale:
                raise LeaseHeld(name, seen.holder, max(0.0, seen.ttl - seen.age),
                                f"the issuer lease {name} is held by node {seen.holder}")
            try:
                etag = self.client.put_object(self.key(name), body, CONTENT_TYPE, {"if-match": seen.etag})
            except S3Error as exc:
                if refused(exc):
                    raise LeaseHeld(name, None, None, f"another node took over the stale issuer lease {name}") from None
                raise
            log.info("took over the stale issuer lease %s of node %s (%.0f s old)", name, seen.holder, seen.age)
            return Lease(name, self.key(name), token, etag or "", time.monotonic())
        raise LeaseHeld(name, None, None, f"the issuer lease {name} kept changing hands")

    def refresh(self, lease: Lease) -> bool:
        """Rewrite the lease on its ETag; False (and `lost` set) when another holder has it now."""
        if lease.lost.is_set():
            return False
        try:
            lease.etag = self.client.put_object(lease.key, self._body(lease.token), CONTENT_TYPE,
                                                {"if-match": lease.etag}) or ""
            lease.refreshed_at = time.monotonic()
            return True
        except S3Error as exc:
            if refused(exc) or time.monotonic() - lease.refreshed_at > self.ttl:
                lease.lost.set()
                log.warning("lost the issuer lease %s: %s", lease.name, exc.message)
                return False
            log.warning("could not refresh the issuer lease %s (will retry): %s", lease.name, exc.message)
            return True

    def release(self, lease: Lease) -> None:
        """Delete the lease on its ETag; a refusal means someone else holds it now, which is fine."""
        if lease.lost.is_set():
            return
        lease.lost.set()
        try:
            self.client.delete_object(lease.key, {"if-match": lease.etag})
        except S3Error as exc:
            if not refused(exc):
                log.warning("could not release the issuer lease %s (it goes stale in %g s): %s",
                            lease.name, self.ttl, exc.message)

    @contextmanager
    def holding(self, name: str):
        """Acquire, refresh every quarter TTL on a thread of its own while the block runs, release."""
        lease = self.acquire(name)
        stop = threading.Event()

        def keep():
            while not stop.wait(self.ttl / 4):
                if not self.refresh(lease):
                    return

        thread = threading.Thread(target=keep, name=f"lease-{name}", daemon=True)
        thread.start()
        try:
            yield lease
        finally:
            stop.set()
            thread.join(self.client.timeout + 5)
            self.release(lease)
