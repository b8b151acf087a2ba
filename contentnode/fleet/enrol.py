"""Becoming and leaving a fleet: init (primary), join codes, join (replica), leave.

Each operation checks everything it can before it changes anything, and
writes the secret files before the state that names them, so an interrupted
operation leaves a standalone node (files without a role are ignored and
overwritten next time).
"""

import hashlib
import re
import secrets

from contentnode.clock import rfc3339
from contentnode.core import buckets, signing
from contentnode.core.fields import FieldError
from contentnode.core.fleet_section import FLEET
from contentnode.core.s3_errors import S3Error
from contentnode.fleet import bundle, follower, joinclaims, joincode, keys, members, publisher, roster, shared, status
from contentnode.fleet.service import SECTION, Fleet
from contentnode.fleet.wire import Refused, loads, unb64

DEFAULT_PREFIX = "contentnode/"
_PREFIX = re.compile(r"^(?:[A-Za-z0-9._-]+/){1,10}$")
PREFIX_MAX = 200
MAX_LIVE_JOIN_CODES = joincode.MAX_LIVE


def bucket_fields(body: dict) -> tuple[dict, str, str]:
    """(public bucket fields, access key, secret key) from an init body; FieldError when bad."""
    checked = buckets.record_fields({**body, "name": "fleet"}, partial=False)
    if "path_style" in body:
        checked["path_style"] = body["path_style"]
    buckets.check_record(checked)
    prefix = body.get("prefix", DEFAULT_PREFIX)
    if not isinstance(prefix, str) or len(prefix) > PREFIX_MAX or not _PREFIX.match(prefix) \
            or any(part in (".", "..") for part in prefix.split("/")):
        raise FieldError('prefix must be folder names ending in "/" (letters, digits, . _ -), such as '
                         '"contentnode/"', "prefix")
    public = {"endpoint": checked["endpoint"], "region": checked["region"], "bucket": checked["bucket"],
              "prefix": prefix, "path_style": checked["path_style"]}
    return public, checked["access_key"], checked["secret_key"]


def _standalone(fleet: Fleet) -> None:
    role = fleet.state()["role"]
    if role != "standalone":
        raise Refused("fleet_member", f"this node is already a fleet {role}; leave the fleet first")


def _bucket_call(what: str, call):
    try:
        return call()
    except S3Error as exc:
        raise Refused("bucket_unreachable", f"{what}: {exc.message}") from None


def init(fleet: Fleet, body: dict) -> tuple[dict, str]:
    """Make this node a primary and publish bundle seq 1; (fleet state, recovery secret)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    with fleet.lock:
        _standalone(fleet)
        bucket, access_key, secret_key = bucket_fields(body)
        signing_key = Ed25519PrivateKey.generate()
        made = keys.Secrets(None, access_key, secret_key, signing_key)
        client = fleet.client(bucket, made)
        key = bucket["prefix"] + publisher.BUNDLE
        if _bucket_call("the bucket cannot be read", lambda: client.get_bytes(key, max_bytes=bundle.MAX_BYTES)):
            raise Refused("fleet_exists", f"the bucket already holds a fleet under {bucket['prefix']!r}; "
                                          "join it with a join code, or choose another prefix")
        recovery_text, recovery_public = keys.new_recovery()
        fleet_id, now = secrets.token_hex(8), fleet.clock.now()
        if not fleet.store.data["links"].get("current"):  # links made on any node need a shared key
            with fleet.store.transaction() as doc:
                doc["links"] = signing.ensure_key(doc["links"], now)
        keys.save(fleet.data_dir, made)
        own = members.make(fleet.data_dir).public()
        members.new_sealing(fleet.data_dir, secrets.token_bytes(32))
        fleet.forget_secrets()
        state = {"role": "primary", "fleet_id": fleet_id, "bucket": bucket, "seq": 0,
                 "members": {fleet.node_id(): dict(own, added_at=rfc3339(now))}, "sealing_id": None,
                 "pin": {"epoch": 1, "public_key": keys.public_text(signing_key),
                         "recovery_public_key": recovery_public},
                 "key_certs": publisher.first_certificate(fleet_id, signing_key, recovery_text, now),
                 "created_at": rfc3339(now), "applied_at": None, "last_error": None, "join_codes": [], "left": None}
        fleet.record(**state)
        try:
            _bucket_call("the first bundle cannot be written", lambda: publisher.publish(fleet, force=True))
        except Refused:
            _back_to_standalone(fleet)
            raise
    fleet.kick()
    return fleet.state(), recovery_text


def mint_join_code(fleet: Fleet, expires_in: int, credentials: tuple[str, str] | None = None) -> tuple[str, str, str]:
    """(code, join id, expires_at) on the primary; `credentials` (access key, secret key): the
    bucket credentials the joiner gets instead of the primary's (its own, read-mostly identity)."""
    with fleet.lock:
        state = fleet.state()
        if state.get("role") != "primary":
            raise Refused("not_primary", "join codes are minted on the fleet's primary")
        now = fleet.clock.now()
        live = [c for c in state.get("join_codes") or [] if c.get("id") not in joincode.expired_ids([c], now)]
        if len(live) >= MAX_LIVE_JOIN_CODES:
            raise Refused("too_many_join_codes", f"{MAX_LIVE_JOIN_CODES} join codes are still valid; "
                                                 "wait for some to expire")
        secrets_ = fleet.secrets()
        if secrets_ is None:
            raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
        claim_private, claim_public = joinclaims.new_claim_key()
        given = (secrets_.access_key, secrets_.secret_key)
        payload = {"fleet_id": state["fleet_id"], "primary": fleet.node_id(), "pin": state["pin"],
                   "bucket": dict(state["bucket"], access_key=(credentials or given)[0], secret_key=(credentials or given)[1]),
                   "claim_key": claim_private,
                   "seq": int(state.get("seq") or 0), "bundle_sha256": state.get("bundle_sha256")}
        code, join_id, expires_at = _bucket_call(
            "the join object cannot be written",
            lambda: joincode.mint(fleet.client(), state["bucket"]["prefix"], payload, expires_in, now))
        fleet.record(join_codes=live + [{"id": join_id, "created_at": rfc3339(now), "expires_at": expires_at,
                                         "used_at": None, "used_by": None, "claim_public": claim_public}])
    fleet.republish()   # the bundle carries the codes (a promoted primary keeps their state)
    return code, join_id, expires_at


LISTED = joincode.LISTED


def join_codes(fleet: Fleet) -> list:
    """The primary's join codes not yet expired and deleted, newest last, never the code itself."""
    return [{k: c.get(k) for k in LISTED} for c in fleet.state().get("join_codes") or []]


def revoke_join_code(fleet: Fleet, join_id: str) -> None:
    """Tombstone the code's object, list it revoked in joins.json, forget it; Refused not_found."""
    with fleet.lock:
        state = fleet.state()
        if state.get("role") != "primary":
            raise Refused("not_primary", "join codes are revoked on the fleet's primary")
        codes = state.get("join_codes") or []
        found = next((c for c in codes if c.get("id") == join_id), None)
        if found is None:
            raise Refused("not_found", f"no join code {join_id!r} on this primary")
        client, prefix = fleet.client(), state["bucket"]["prefix"]
        kept = [c for c in codes if c is not found]
        revoked = (state.get("join_revoked") or []) + [{"id": join_id, "expires_at": found["expires_at"]}]

        def write():
            client.put_object(joincode.object_key(prefix, join_id), joincode.tombstone("revoked", join_id),
                              "application/json")
            joinclaims.publish_list(fleet, client, kept, revoked)
        _bucket_call("the revocation cannot be written", write)
        fleet.record(join_codes=kept, join_revoked=revoked)
    fleet.republish()


def remove_node(fleet: Fleet, node_id: str) -> None:
    """DELETE /api/fleet/nodes/{node_id} on the primary (fleet/roster.py)."""
    with fleet.lock:
        roster.remove(fleet, node_id, "removed on the primary")


def _payload(payload: dict) -> tuple[dict, keys.Secrets, keys.Pin]:
    try:
        bucket = {k: payload["bucket"][k] for k in ("endpoint", "region", "bucket", "prefix", "path_style")}
        fleet_key = payload.get("fleet_key")   # from a primary before member lists only
        made = keys.Secrets(None if fleet_key is None else unb64(fleet_key, "fleet key", keys.FLEET_KEY_BYTES),
                            payload["bucket"]["access_key"], payload["bucket"]["secret_key"])
        pin = keys.Pin(payload["pin"]["epoch"], payload["pin"]["public_key"], payload["pin"]["recovery_public_key"])
    except (KeyError, TypeError):
        raise Refused("bad_join_code", "the join code's payload is malformed") from None
    return bucket, made, pin


def _cannot_take(fleet: Fleet, sections: dict) -> str | None:
    """Why this node would refuse the fleet's current configuration (a folder bucket outside its
    folder_roots, no administrator yet), or None: the join says it before it happens."""
    try:
        follower.check(fleet, fleet.store.data, sections)
    except Refused as exc:
        return exc.message
    return None


def _not_older(payload: dict, seq: int, sha256: str) -> int:
    """The seq the primary had published when the code was minted (0 for a code minted before
    codes carried it); Refused "older_seq" when the bucket's bundle is older, or is another one
    at that seq: a bucket writer put an older bundle back."""
    floor, expected = payload.get("seq"), payload.get("bundle_sha256")
    if type(floor) is not int:
        return 0
    if seq < floor or (seq == floor and isinstance(expected, str) and sha256 != expected):
        raise Refused("older_seq", f"the bucket's bundle (seq {seq}) is older than the one the primary had "
                                   f"published when this code was made (seq {floor}): not joining a rolled-back fleet")
    return floor


def _not_used(client, prefix: str, payload: dict, join_id: str, signer_public: str, node_id: str) -> None:
    """Refused join_code_used or join_code_revoked when the primary's signed list or another
    node's claim says so (a code minted before codes carried a claim key is not checked)."""
    if not isinstance(payload.get("claim_key"), str):
        return
    _bucket_call("the join codes' state cannot be read", lambda: joinclaims.check_list(
        client, prefix, payload["fleet_id"], signer_public, join_id, node_id))
    _bucket_call("the join claim cannot be read", lambda: joinclaims.check_claim(
        client, prefix, join_id, payload["claim_key"], node_id))


def join(fleet: Fleet, code: str, dry_run: bool) -> dict:
    """Check the code and the fleet's current bundle; unless dry_run, become a replica."""
    with fleet.lock:
        _standalone(fleet)
        now = fleet.clock.now()
        join_id, payload = joincode.redeem(code, fleet.outbound(), now)
        bucket, made, pin = _payload(payload)
        client = fleet.client(bucket, made)
        found = _bucket_call("the fleet's bundle cannot be read", lambda: bundle.fetch(
            client, bucket["prefix"] + publisher.BUNDLE, payload["fleet_id"]))
        if found is None:
            raise Refused("no_bundle", "the bucket holds no bundle for this fleet yet")
        opened = bundle.open_bundle(bundle.parse(found.body, payload["fleet_id"], pin), fleet_id=payload["fleet_id"], pin=pin,
                                    fleet_key=lambda data: _joining_key(data, made.fleet_key), applied_seq=0, now=now,
                                    names=shared.PARTS, sealed=shared.SEALED)
        if opened is None:  # seq 0 is never published: a bundle always opens against it
            raise Refused("malformed", "the fleet's bundle has no seq")
        floor = _not_older(payload, opened.seq, hashlib.sha256(found.body).hexdigest())
        _not_used(client, bucket["prefix"], payload, join_id, opened.pin.public_key, fleet.node_id())
        answer = {"fleet_id": payload["fleet_id"], "primary": opened.primary, "seq": opened.seq,
                  "dry_run": dry_run, "replaces": shared.counts(fleet.store.data), **_takes(fleet, opened.parts)}
        if dry_run:
            return answer
        own = members.new()   # new at each join: keys of a past membership are not reused
        if isinstance(payload.get("claim_key"), str):
            _bucket_call("the join claim cannot be written", lambda: joinclaims.write_claim(
                client, bucket["prefix"], join_id, payload["claim_key"], fleet.node_id(), now, own.public(),
                _own_leave(fleet, payload["fleet_id"])))
        keys.save(fleet.data_dir, made)
        members.make(fleet.data_dir, own)
        fleet.forget_secrets()
        fleet.record(role="replica", fleet_id=payload["fleet_id"], bucket=bucket, seq=0, join_seq=floor,
                     applied_at=None,
                     primary=opened.primary, last_error=None, last_purge_id=None, joined_at=rfc3339(now),
                     membership=secrets.token_hex(8),  # new at each join: the poll's ETag is for one
                     members={}, sealing_id=None, listed=False, removed=None, left=None,
                     pin={"epoch": pin.epoch, "public_key": pin.public_key,
                          "recovery_public_key": pin.recovery_public_key})
    fleet.kick()
    return answer


def _own_leave(fleet: Fleet, fleet_id: str) -> dict | None:
    """This node's signed leave of `fleet_id` (kept by `leave`), which its claim carries when it
    joins that fleet again: its status may be overwritten before the primary read it."""
    left = fleet.state().get("left") or {}
    return left.get("status") if left.get("fleet_id") == fleet_id else None


def _joining_key(data, fleet_key: bytes | None) -> bytes | None:
    """The key a joiner opens the current bundle's sealed parts with: the fleet key of a primary
    before member lists (or one still sealing under it); None (count the plain parts only) when
    the sealing key is wrapped for members, which this node is not yet."""
    if data is None or (isinstance(data, dict) and data.get("sealing_id") == members.LEGACY):
        if fleet_key is None:
            raise Refused("bad_join_code", "the fleet seals under a fleet key this join code does not carry")
        return fleet_key
    return None


def _takes(fleet: Fleet, parts: dict) -> dict:
    """The join answer's "with" (what the fleet's configuration holds) and "cannot_take"; with
    the sealed parts unopened (the primary adds this node first), what they hold is null and
    whether this node can take it is said at the first apply (its last_error)."""
    if all(parts.get(name) is not None for name in shared.SEALED):
        sections = shared.applied(fleet.store.data, parts)
        return {"with": shared.counts(sections), "cannot_take": _cannot_take(fleet, sections)}
    counts = shared.counts({"domains": parts.get("domains"), "rules": parts.get("rules"),
                            "settings": parts.get("settings") if isinstance(parts.get("settings"), dict) else {}})
    return {"with": dict(counts, buckets=None, link_keys=None), "cannot_take": None}


def _back_to_standalone(fleet: Fleet) -> None:
    keys.remove(fleet.data_dir)
    fleet.forget_secrets()
    with fleet.store.transaction() as doc:
        doc[SECTION] = FLEET.defaults()
        doc.pop(shared.PURGES, None)


def leave(fleet: Fleet) -> dict:
    """Back to standalone, keeping the configuration last applied or published."""
    with fleet.lock:
        state = fleet.state()
        if state["role"] == "standalone":
            raise Refused("not_in_fleet", "this node is not in a fleet")
        signed = None
        if state["role"] == "replica" and fleet.member() is not None and not state.get("removed"):
            signed = fleet.authority("status").write({"node_id": fleet.node_id(), "left": True,
                                                      "seen_at": rfc3339(fleet.clock.now())})
        try:  # a member's last status, signed: the primary removes it and replaces the sealing key
            client, key = fleet.client(), status.key(state["bucket"]["prefix"], fleet.node_id())
            if signed is not None:
                client.put_object(key, signed, "application/json")
            else:
                client.delete_object(key)
        except (S3Error, Refused):
            pass  # its status simply goes unseen on the primary (a rejoin's claim carries the leave)
        _back_to_standalone(fleet)
        if signed is not None:   # kept for a join again: the primary takes the claim only after it
            fleet.record(left={"fleet_id": state.get("fleet_id"), "status": loads(signed)})
    return {"role": "standalone", "left": state.get("fleet_id"), "was": state.get("role")}
