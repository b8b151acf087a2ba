"""The primary's member list: adding a node that joined, removing one (DELETE
/api/fleet/nodes/{node_id}, or its own signed `leave`), and adopting the nodes
of a fleet upgraded from before member lists (docs/API.md, Fleet).

The list lives in the fleet section ("members": {node_id: {"sign", "wrap",
"added_at"}}: public keys only) and travels in every bundle (fleet/members.py).
A removal or a leave asks for a new sealing key in the same write
("rotate_sealing"), so the next bundle is sealed under a key wrapped for the
remaining members only.
"""

import logging

from contentnode.clock import rfc3339
from contentnode.core.s3_errors import S3Error
from contentnode.fleet import members, status
from contentnode.fleet.wire import Refused

log = logging.getLogger("contentnode.fleet")


def _listed(fleet) -> dict:
    return dict(fleet.state().get("members") or {})


def add(fleet, joined: dict) -> None:
    """Add the nodes of `joined` {node_id: public keys} (their join claims); publish at once. A
    listed node that joined again (with a new code) comes with new keys: they replace its old
    ones, and so does the sealing key (the old keys may have been copied before it left)."""
    listed, now = _listed(fleet), rfc3339(fleet.clock.now())
    new = {node_id: dict(public, added_at=now) for node_id, public in joined.items()
           if {k: (listed.get(node_id) or {}).get(k) for k in ("sign", "wrap")} != public}
    if new:
        fleet.record(members={**listed, **new}, **({"rotate_sealing": True} if set(new) & set(listed) else {}))
        log.info("fleet: added member(s) %s", ", ".join(sorted(new)))
        fleet.republish()


def remove(fleet, node_id: str, why: str) -> None:
    """Take `node_id` off the member list and ask for a new sealing key; its status object goes
    too (so it is gone from `nodes` at once). Refused not_found / is_primary. Caller holds the lock."""
    state = fleet.state()
    if state.get("role") != "primary":
        raise Refused("not_primary", "fleet members are removed on the fleet's primary")
    listed = _listed(fleet)
    if node_id == fleet.node_id():
        raise Refused("is_primary", "the primary cannot remove itself; promote another node, then remove this one")
    if node_id not in listed and all(row.get("node_id") != node_id for row in fleet.nodes):
        raise Refused("not_found", f"no fleet node {node_id!r}")
    listed.pop(node_id, None)
    fleet.record(members=listed, rotate_sealing=True)
    fleet.nodes = [row for row in fleet.nodes if row.get("node_id") != node_id]
    fleet.removed_since_read.add(node_id)   # a poll reading the statuses meanwhile must not show it again
    try:
        fleet.client().delete_object(status.key(state["bucket"]["prefix"], node_id))
    except S3Error as exc:
        log.warning("fleet: cannot delete the status of removed node %s: %s", node_id, exc.message)
    log.warning("fleet: node %s is no longer a member (%s): the sealing key is replaced", node_id, why)
    fleet.republish()


def settle(fleet, client, found: list) -> list:
    """The statuses the primary lists, after acting on what they say: a member that left (its own
    signed status says so) is removed; in a fleet still sealing under its fleet key, a node whose
    fleet-key status carries member keys is adopted (it could open every bundle already)."""
    listed = _listed(fleet)
    legacy = fleet.state().get("sealing_id") == members.LEGACY
    left = [row["node_id"] for row in found if row.get("left")]
    adopt = {row["node_id"]: row["member_keys"] for row in found
             if legacy and not row.get("left") and row.get("member_keys") and row["node_id"] not in listed}
    with fleet.lock:
        for node_id in left:
            if node_id in listed:
                remove(fleet, node_id, "it left")
            else:
                client.delete_object(status.key(fleet.state()["bucket"]["prefix"], node_id))
        if adopt:
            add(fleet, adopt)
    return [row for row in found if not row.get("left")]
