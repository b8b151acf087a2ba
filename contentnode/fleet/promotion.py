"""A new signing key for the fleet: promotion of a replica, rotation on a live primary.

Promotion (the primary is gone): the operator gives a replica the recovery
secret. The replica reads the bucket's current bundle and verifies it from
its own pin, so it knows the fleet's current key epoch and recovery key, and
refuses a secret that is not that recovery key. A secret that did sign an
earlier promotion (or the fleet's first key) but was replaced since is named
as used. The replica then makes a signing key, certifies it at the next epoch
with the recovery key, and names a NEW recovery key in that certificate: the
secret it was given is spent, and the answer shows the new one once. Its first
bundle is written with `If-Match` on the ETag of the bundle it verified when
the bucket honours conditional writes (fleet/probe.py), so of two replicas
promoted at once exactly one becomes primary; the other goes back to being a
replica and follows it. Replicas follow because the new key's certificate is
signed by the recovery key they pinned; an old primary that comes back sees the
higher epoch before it publishes and steps down (fleet/publisher.py).

Rotation (the primary is alive): the new key is certified by the current one
("previous"). The new key is written as signing.next before the state names
it and renamed over signing.key after, and `finish_rotation` completes or
drops an interrupted rotation at start, so a kill -9 never leaves a key that
does not match the chain the state publishes.
"""

import os
from typing import TYPE_CHECKING

from contentnode.clock import rfc3339
from contentnode.core.s3_errors import S3Error
from contentnode.fileio import fsync_dir
from contentnode.fleet import bundle, joincode, keys, members, publisher, shared
from contentnode.fleet.follower import pin_of
from contentnode.fleet.wire import Refused, unb64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

NEXT_FILE = "signing.next"


def _pin_record(epoch: int, signing: "Ed25519PrivateKey", recovery_public: str) -> dict:
    return {"epoch": epoch, "public_key": keys.public_text(signing), "recovery_public_key": recovery_public}


def _current_bundle(fleet, state: dict):
    """(parsed bundle, its ETag, the pin it verifies to) of the bucket's bundle.json."""
    client = fleet.client()
    try:
        found = bundle.fetch(client, state["bucket"]["prefix"] + publisher.BUNDLE, state["fleet_id"])
    except S3Error as exc:
        raise Refused("bucket_unreachable", f"the fleet's bundle cannot be read: {exc.message}") from None
    if found is None:
        raise Refused("no_bundle", "the bucket holds no bundle for this fleet")
    doc = bundle.parse(found.body, state["fleet_id"], pin_of(state))
    return doc, found.etag, bundle.verify(doc, state["fleet_id"], pin_of(state))


def _part_data(doc: dict, name: str):
    """An unsealed part's value in a verified bundle (None when it is not there)."""
    part = doc["parts"].get(name)
    return part.get("data") if isinstance(part, dict) else None


def _carried(data, now: float) -> dict:
    """What a promoted primary takes over from the verified bundle's members part: the members
    (to wrap its new sealing key for) and the old primary's join codes with their used and revoked
    state, so a code it minted keeps its state (docs/API.md, Fleet)."""
    if not isinstance(data, dict):
        return {"join_codes": [], "join_revoked": []}
    rows = [c for c in data.get("join_codes") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)
            and isinstance(c.get("expires_at"), str) and isinstance(c.get("claim_public"), (str, type(None)))]
    revoked = [c for c in data.get("join_revoked") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)
               and isinstance(c.get("expires_at"), str)]
    listed = {node_id: dict(public, added_at=rfc3339(now)) for node_id, public in members.listed(data).items()}
    codes = [{k: c.get(k) for k in (*joincode.LISTED, "claim_public")} for c in rows[:joincode.MAX_LIVE]]
    return {"members": listed, "join_codes": codes, "join_revoked": revoked[:joincode.MAX_LIVE]}


def _check_recovery(secret: str, chain: list, current: keys.Pin) -> "Ed25519PrivateKey":
    recovery = keys.recovery_key(secret)
    public = keys.public_text(recovery)
    if public == current.recovery_public_key:
        return recovery
    used = keys.recovery_signed(chain, public)
    if used is not None:
        raise Refused("recovery_secret_used", f"this recovery secret signed key epoch {used} and was replaced "
                                              "by a promotion since; use the recovery secret that promotion showed")
    raise Refused("bad_recovery_secret", "this is not the fleet's recovery secret")


def check_promotable(state: dict) -> None:
    """Refused unless this node is a replica that holds the fleet's configuration: one that never
    applied a bundle (seq 0) holds its configuration from before the fleet, which its first bundle
    would publish to every node. A demoted primary (seq > 0, no applied_at: it published, never
    applied) holds the fleet's own and may be promoted back."""
    if state.get("role") != "replica":
        raise Refused("not_replica", f"only a replica can be promoted; this node is {state['role']}")
    if not int(state.get("seq") or 0):
        raise Refused("never_applied", "this replica never applied a bundle of the fleet (see its last_error): "
                                       "promoted, it would publish its own configuration from before it joined; "
                                       "promote a replica that applied one")


def promote(fleet, recovery_secret: str, conditional: bool) -> str:
    """Make this replica the primary; returns the new recovery secret (shown once).

    `conditional`: the bucket honours conditional writes, so the first bundle is
    written only over the one verified here. Refused when anything is wrong; the
    node is then a replica as before."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with fleet.lock:
        state = fleet.state()
        check_promotable(state)
        secrets_ = fleet.secrets()
        if secrets_ is None:
            raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
        doc, etag, current = _current_bundle(fleet, state)
        recovery = _check_recovery(recovery_secret, doc["keys"], current)
        now = fleet.clock.now()
        signing = Ed25519PrivateKey.generate()
        next_secret, next_public = keys.new_recovery()
        epoch = current.epoch + 1
        cert = keys.certify(state["fleet_id"], epoch, keys.public_text(signing), rfc3339(now), recovery,
                            "recovery", next_recovery=next_public)
        keys.save_signing(fleet.data_dir, signing)  # unused while the state says replica
        fleet.forget_secrets()
        history = fleet.store.data.get(shared.PURGES)
        with fleet.store.transaction() as tx:  # the bundle's purges are signed, not sealed
            tx[shared.PURGES] = shared.continued_purges(history, _part_data(doc, "purges"), state.get("last_purge_id"))
        fleet.record(role="primary", pin=_pin_record(epoch, signing, next_public), key_certs=doc["keys"] + [cert],
                     seq=max(int(state.get("seq") or 0), doc["seq"]), bundle_etag=etag, primary=None,
                     promoted_at=rfc3339(now), last_error=None, demoted=None, parts_digest=None, issued_at=None,
                     rotate_sealing=True, **_carried(_part_data(doc, bundle.MEMBERS), fleet.clock.now()))
        try:
            publisher.publish(fleet, force=True, expect_etag=etag if conditional else None)
        except (S3Error, Refused) as exc:
            keys.remove_signing(fleet.data_dir)
            fleet.forget_secrets()
            with fleet.store.transaction() as tx:
                tx["fleet"] = state
                if history is None:
                    tx.pop(shared.PURGES, None)
                else:
                    tx[shared.PURGES] = history
            if isinstance(exc, S3Error) and exc.code == "precondition_failed":
                raise Refused("promotion_lost", "another node published a bundle meanwhile (promoted at the "
                                                "same time?); this node stays a replica and follows it") from None
            message = exc.message
            raise Refused("bucket_unreachable", f"the first bundle could not be written: {message}") from None
    fleet.kick()
    return next_secret


def rotate_key(fleet) -> int:
    """A new signing key on the live primary, certified by the current one; the new epoch."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with fleet.lock:
        state = fleet.state()
        secrets_ = fleet.secrets()
        if state.get("role") != "primary":
            raise Refused("not_primary", "the signing key is rotated on the fleet's primary")
        if secrets_ is None or secrets_.signing is None:
            raise Refused("no_secrets", "this node's signing key is missing from its data dir (fleet/)")
        epoch = int(state["pin"]["epoch"]) + 1
        signing = Ed25519PrivateKey.generate()
        cert = keys.certify(state["fleet_id"], epoch, keys.public_text(signing), rfc3339(fleet.clock.now()),
                            secrets_.signing, "previous")
        keys.save_signing(fleet.data_dir, signing, NEXT_FILE)
        fleet.record(pin=_pin_record(epoch, signing, state["pin"]["recovery_public_key"]),
                     key_certs=state["key_certs"] + [cert], parts_digest=None, rotate_sealing=True)
        finish_rotation(fleet.data_dir, fleet.state())
        fleet.forget_secrets()
    fleet.republish()  # the job publishes the new chain at once (and retries if the bucket fails)
    return epoch


def finish_rotation(data_dir: str, state: dict) -> None:
    """A signing.next left by a rotation becomes signing.key if the state names it, else goes.
    Every start asks: cryptography is imported only when there is such a file."""
    folder = keys.folder(data_dir)
    pending = os.path.join(folder, NEXT_FILE)
    if not os.path.exists(pending):
        return
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with open(pending, "rb") as f:
        key = Ed25519PrivateKey.from_private_bytes(unb64(f.read().decode("ascii").strip(), NEXT_FILE, 32))
    if keys.public_text(key) == (state.get("pin") or {}).get("public_key") and state.get("role") == "primary":
        os.replace(pending, os.path.join(folder, keys.SIGNING_FILE))
    else:
        os.unlink(pending)
    fsync_dir(folder)
