"""The replica's side: poll bundle.json, verify it, apply it atomically.

Each poll is one conditional GET (If-None-Match: the ETag last seen). A new
object is verified whole (bundle.open_bundle: key chain, signature, fleet_id,
seq strictly higher, not expired, parts) and the configuration it gives must
pass the restore checks; only then ONE store transaction swaps the shared
sections and records the new seq, so a kill -9 leaves the old configuration
or the new one, never a mix. Any failure keeps the last good configuration
and is recorded as last_error. The ETag of a bundle refused for what it is
(signature, seq, expiry, parts) is remembered, so it is refused once, not
re-verified every poll; one refused by this node's own checks (restore_checks:
no administrator yet, a folder outside its folder_roots) is fetched again at
the next poll, so it applies as soon as the node is fixed (one GET of at most
bundle.MAX_BYTES and one verify per poll, the incident notified once).
"""

import logging
import time

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core.backup import BackupError
from contentnode.fleet import bundle, certfiles, members, shared
from contentnode.fleet.keys import Pin
from contentnode.fleet.publisher import BUNDLE
from contentnode.fleet.wire import Refused
from contentnode.restore import check_records

log = logging.getLogger("contentnode.fleet")
LOCAL_CAUSE = "restore_checks"   # a refusal this node may fix without a new bundle


def pin_of(state: dict) -> Pin:
    pin = state["pin"]
    return Pin(pin["epoch"], pin["public_key"], pin["recovery_public_key"])


def sealing_key(state: dict, node_id: str, member, fleet_key: bytes | None):
    """The function bundle.open_bundle asks for the key of the sealed parts, given the bundle's
    members part (None from a primary before member lists: then the fleet key given at join)."""
    def key_of(data):
        if data is None:
            if fleet_key is None:
                raise Refused("sealed_part", "the bundle is sealed under a fleet key this node never received")
            return fleet_key
        return members.sealing_key_of(data, state["fleet_id"], node_id, member, fleet_key, bool(state.get("listed")))
    return key_of


def poll(fleet, etag: str | None) -> tuple[str, str | None]:
    """One look at the bucket: (what happened, the ETag to send next time).

    "unchanged", "applied" or "refused"; S3Error when the bucket fails.
    """
    state = fleet.state()
    secrets_ = fleet.secrets()
    if state.get("role") != "replica" or secrets_ is None:
        return "unchanged", etag
    try:
        found = bundle.fetch(fleet.client(), state["bucket"]["prefix"] + BUNDLE, state["fleet_id"], etag)
    except Refused as exc:   # junk: refused from its first bytes, re-read every poll (no ETag kept)
        fleet.refused(exc)
        return "refused", etag
    if found is None:
        raise Refused("no_bundle", "the bucket holds no bundle.json under the fleet's prefix")
    if found.not_modified:
        _seen(fleet, state)
        return "unchanged", etag
    sealing = sealing_key(state, fleet.node_id(), fleet.member(), secrets_.fleet_key)
    try:
        opened = bundle.open_bundle(bundle.parse(found.body, state["fleet_id"], pin_of(state)),
                                    fleet_id=state["fleet_id"], pin=pin_of(state),
                                    fleet_key=sealing, applied_seq=int(state.get("seq") or 0),
                                    now=fleet.clock.now(), names=shared.PARTS, sealed=shared.SEALED)
        if opened is None:
            _seen(fleet, state)
            return "unchanged", found.etag
        if opened.seq < int(state.get("join_seq") or 0):
            raise Refused("older_seq", f"the bundle's seq {opened.seq} is below seq {state['join_seq']}, the "
                                       "primary's when this node's join code was made (an older bundle put back)")
        apply(fleet, opened)
    except Refused as exc:
        if exc.code == members.NOT_A_MEMBER:
            fleet.no_longer_member(exc)
        else:
            fleet.refused(exc)
        # pending: the primary lists it in its next bundle, under a new ETag (fleet/service.py polls
        # every second meanwhile)
        return "refused", None if exc.code == LOCAL_CAUSE else found.etag
    return "applied", found.etag


def _seen(fleet, state: dict) -> None:
    """The bundle applied is still the current one; report it once it is past its expires_at
    (the primary stopped re-signing: is it running?). It keeps serving all the same."""
    fleet.record_seen()
    try:
        expired = parse_rfc3339(state["expires_at"]) <= fleet.clock.now()
    except (KeyError, TypeError, ValueError):
        return
    if expired:
        fleet.refused(Refused("expired", f"the fleet's bundle expired at {state['expires_at']} and the primary has "
                                         "not re-signed it (is it running?); serving it until a new one comes"))


SUBJECT = "the fleet's configuration cannot be applied on this node ({})"


def check(fleet, current: dict, sections: dict) -> None:
    """Refused (restore_checks) when the node's document with these shared sections would not
    pass a restore's checks here (its folder_roots, its own accounts)."""
    try:
        check_records({**current, **sections}, fleet.folder_roots, SUBJECT)
    except BackupError as exc:
        raise Refused(LOCAL_CAUSE, str(exc)) from None


def _membership(opened: bundle.Opened, node_id: str) -> dict:
    """What a replica keeps of the members part it applied: the members' public keys (to judge
    its primary's status and the fleet's leases), the sealing id, whether it was listed."""
    data = opened.parts.get(bundle.MEMBERS)
    if not isinstance(data, dict):
        return {"members": {}, "sealing_id": None}
    listed = members.listed(data)
    return {"members": listed, "sealing_id": data.get("sealing_id"), "listed": node_id in listed, "removed": None}


def apply(fleet, opened: bundle.Opened) -> None:
    """Check the resulting configuration like a restore, purge, then swap it in at once."""
    started = time.monotonic()
    store = fleet.store
    current = store.data
    sections = shared.applied(current, opened.parts)
    check(fleet, current, sections)
    certificates = certfiles.check(opened.parts.get(shared.CERTIFICATES), sections["domains"], fleet.certs)
    state = current.get("fleet") or {}
    newer, everything, newest = shared.purges_to_run(opened.parts.get("purges") or [], state.get("last_purge_id"))
    fleet.run_purges(newer, everything)
    certfiles.install(fleet.certs, certificates)  # before the records: a crash between serves the newer files
    now = rfc3339(fleet.clock.now())
    with store.transaction() as doc:
        for name, value in sections.items():
            doc[name] = value
        record = dict(doc["fleet"])
        record.update(seq=opened.seq, applied_at=now, bundle_seen_at=now, last_error=None, primary=opened.primary,
                      last_purge_id=newest, expires_at=rfc3339(opened.expires_at),
                      pin={"epoch": opened.pin.epoch, "public_key": opened.pin.public_key,
                           "recovery_public_key": opened.pin.recovery_public_key}, **_membership(opened, fleet.node_id()))
        doc["fleet"] = record
    certfiles.prune(fleet.certs, certificates)  # after the records: until then they may still serve these
    if everything:
        fleet.run_purges([], True)  # what a request cached under the old configuration meanwhile
    log.info("fleet: applied bundle seq %d from %s in %.3f s", opened.seq, opened.primary, time.monotonic() - started)
