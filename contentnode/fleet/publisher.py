"""The primary's side: publish a new signed bundle after each change of what
the fleet shares, re-sign before half its lifetime has passed, and step down
when the bucket shows a higher key epoch.

Every poll, and before it publishes, the primary re-reads bundle.json
conditionally on the ETag of its own last write: 304 means no one else wrote it; anything else (deleted, damaged,
replaced) is written over, even when its own configuration did not change. A bundle whose key chain
verifies from this node's pin to a higher key epoch means another node was
promoted: this node stops publishing and becomes a replica pinned to its own
key, so it follows the new primary only if the new key's certificate chains
to it or to the recovery key (never a second primary). One that does not
verify is overwritten: write access to the bucket alone must not stop the
primary.
"""

import hashlib
import secrets
import logging

from contentnode.clock import parse_rfc3339, rfc3339
from contentnode.core.s3_errors import S3Error
from contentnode.fleet import bundle, certfiles, joinclaims, joincode, keys, members, shared
from contentnode.fleet.wire import Refused, canonical

log = logging.getLogger("contentnode.fleet")

LIFETIME_SECONDS = 24 * 3600   # a bundle's expires_at is issued_at + this
# before half the lifetime, leaving two hours of polls and bucket backoff for the re-signed bundle to land
RESIGN_AFTER_SECONDS = 10 * 3600
BUNDLE = "bundle.json"


def parts_digest(parts: dict) -> str:
    return hashlib.sha256(canonical(parts)).hexdigest()


def resign_due(state: dict, now: float) -> bool:
    """RESIGN_AFTER_SECONDS have passed since the last bundle (or none was issued)."""
    try:
        return now >= parse_rfc3339(state["issued_at"]) + RESIGN_AFTER_SECONDS
    except (KeyError, TypeError, ValueError):
        return True


def _found_bundle(client, key: str, etag: str | None, state: dict):
    """(whether bundle.json is still the object this node wrote last, the parsed object
    when it is another one signed by a key chaining to this node's pin, else None)."""
    try:
        found = bundle.fetch(client, key, state["fleet_id"], etag)
        if found is not None and found.not_modified:
            return True, None
        if found is None:
            return False, None  # deleted: the next PUT writes it again
        return False, bundle.parse(found.body, state["fleet_id"], keys.Pin(**state["pin"]))
    except Refused as exc:
        log.warning("fleet: overwriting a bundle.json this node did not write: %s", exc.message)
        return False, None  # a damaged or forged object: the next PUT replaces it


def bundle_intact(fleet) -> bool:
    """Whether bundle.json is still the object this node wrote last: one conditional GET (ETag),
    answered 304 while it is (S3Error when the bucket fails)."""
    state = fleet.state()
    if state.get("role") != "primary":
        return False
    client, key = fleet.client(), state["bucket"]["prefix"] + BUNDLE
    if state.get("bundle_etag"):
        return _found_bundle(client, key, state["bundle_etag"], state)[0]
    try:   # a bucket that gave no ETag: compare the bytes with the hash of the last write
        found = bundle.fetch(client, key, state["fleet_id"])
    except Refused:
        return False
    return found is not None and hashlib.sha256(found.body).hexdigest() == state.get("bundle_sha256")


def publish(fleet, force: bool = False, expect_etag: str | None = None) -> str:
    """Publish when the shared parts changed (or `force`, or re-signing is due), or when
    bundle.json is no longer the object this node wrote last (deleted, damaged, replaced).

    `expect_etag`: write only over that object (If-Match; a promotion's first bundle).

    Returns what happened: "unchanged", "published" or "demoted". S3Error when the
    bucket fails (the caller retries with backoff); nothing is recorded then.
    """
    state = fleet.state()
    secrets_ = fleet.secrets()
    if state.get("role") != "primary" or secrets_ is None or secrets_.signing is None:
        return "unchanged"
    now = fleet.clock.now()
    doc = fleet.store.data
    parts = shared.parts_of(doc, certfiles.read(fleet.certs, doc["domains"]))
    sealing_id, sealing_key, listed, extra = _roster(fleet, state, secrets_)
    digest = parts_digest({**parts, bundle.MEMBERS: {"listed": listed, "sealing_id": sealing_id, **extra}})
    changed = force or digest != state.get("parts_digest") or resign_due(state, now)
    client = fleet.client()
    key = state["bucket"]["prefix"] + BUNDLE
    seq = int(state.get("seq") or 0)
    # a bundle.json replaced behind this node's back is written over even without a change
    ours, found = _found_bundle(client, key, state.get("bundle_etag"), state)
    if ours and not changed:
        return "unchanged"
    signer = bundle.verify(found, state["fleet_id"], keys.Pin(**state["pin"])) if found is not None else None
    if signer is not None and signer.epoch > state["pin"]["epoch"]:
        fleet.demote(f"the bucket holds a bundle signed at key epoch {signer.epoch}, above this node's "
                     f"{state['pin']['epoch']}: another node was promoted; this one stopped publishing")
        return "demoted"
    if signer is not None:  # its own bundle, written before a crash lost the ETag
        seq = max(seq, found["seq"])
    seq += 1
    parts[bundle.MEMBERS] = members.part(state["fleet_id"], sealing_id, sealing_key, listed, extra)
    raw = bundle.build(fleet_id=state["fleet_id"], seq=seq, issued_at=now, lifetime=LIFETIME_SECONDS,
                       primary=fleet.node_id(), key_certs=state["key_certs"], signing=secrets_.signing,
                       fleet_key=sealing_key, parts=parts, sealed=shared.SEALED)
    etag = client.put_object(key, raw, "application/json", {"if-match": expect_etag} if expect_etag else None)
    fleet.record(seq=seq, bundle_etag=etag, issued_at=rfc3339(now), expires_at=rfc3339(now + LIFETIME_SECONDS),
                 parts_digest=digest, last_error=None, bundle_sha256=hashlib.sha256(raw).hexdigest(),
                 sealing_id=sealing_id, rotate_sealing=False)
    log.info("fleet: published bundle seq %d (%d bytes)", seq, len(raw))
    return "published"


def _roster(fleet, state: dict, secrets_) -> tuple[str, bytes, dict, dict]:
    """(sealing id, sealing key, the members to wrap it for, the join codes' state) of the next
    bundle. The sealing key is replaced first when a removal, leave, rotate-key or promotion
    asked for it (`rotate_sealing`, recorded with the change; set back only with the bundle
    published under the new key, so a crash between rotates once more, never publishes the old
    key to the remaining members only). A primary upgraded from before member lists lists
    itself and seals under its fleet key (LEGACY) until the first rotation."""
    sealing = members.load_sealing(fleet.data_dir)
    if sealing is None or state.get("rotate_sealing"):
        legacy = sealing is None and secrets_.fleet_key is not None and not state.get("rotate_sealing")
        key = secrets_.fleet_key if legacy else secrets.token_bytes(32)
        sealing = members.new_sealing(fleet.data_dir, key, members.LEGACY if legacy else None), key
    listed = {node_id: {"sign": row["sign"], "wrap": row["wrap"]}
              for node_id, row in (state.get("members") or {}).items()}
    if fleet.node_id() not in listed:
        own = members.ensure(fleet.data_dir).public()
        fleet.record(members={**(state.get("members") or {}), fleet.node_id(): dict(own, added_at=state.get("created_at"))})
        listed[fleet.node_id()] = own
    extra = {"join_codes": [{k: c.get(k) for k in (*joincode.LISTED, "claim_public")}
                            for c in state.get("join_codes") or []],
             "join_revoked": [{"id": c.get("id"), "expires_at": c.get("expires_at")}
                              for c in state.get("join_revoked") or []]}
    return sealing[0], sealing[1], listed, extra


def first_certificate(fleet_id: str, signing, recovery_text: str, now: float) -> list:
    """The key chain of a new fleet: epoch 1, signed by the recovery key."""
    return [keys.certify(fleet_id, 1, keys.public_text(signing), rfc3339(now), keys.recovery_key(recovery_text),
                         "recovery")]


def delete_expired_joins(fleet, client) -> None:
    """Remove the sealed objects and claims of join codes whose time is up, and forget them
    (and the revoked ones whose time is up)."""
    state = fleet.state()
    codes, revoked = state.get("join_codes") or [], state.get("join_revoked") or []
    prefix, now = state["bucket"]["prefix"], fleet.clock.now()
    gone = set()
    for join_id in joincode.expired_ids(codes + revoked, now):
        try:
            client.delete_object(joincode.object_key(prefix, join_id))
            client.delete_object(joinclaims.claim_key(prefix, join_id))
            gone.add(join_id)
        except S3Error as exc:
            log.warning("fleet: cannot delete expired join object %s: %s", join_id, exc.message)
    if gone:
        fleet.record(join_codes=[c for c in codes if c.get("id") not in gone],
                     join_revoked=[c for c in revoked if c.get("id") not in gone])
