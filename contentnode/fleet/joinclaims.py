"""Single-use join codes: how the primary learns that a code was used, and how a
second joiner learns it too, and how the joiner's member keys reach the member list
(docs/API.md, Fleet).

Each code's sealed payload carries a claim key (Ed25519, made at mint; the
primary keeps only its public half). A joiner that completes a join first
writes claims/<id>.json, {"id","node_id","claimed_at","keys"[,"left"]} signed with it
("keys": the joiner's public member keys, fleet/members.py; "left": a node
that left this fleet and joins again adds its own signed leave). At its next poll
the primary takes the first valid claim of each open code: the code is used by
that node, the node is added to the members (fleet/roster.py), its sealed object joins/<id> is overwritten with a
tombstone ({"id","state"}: the code's URL now opens nothing), and joins.json,
the list of used and revoked codes signed with the fleet's signing key, is
written again. A joiner refuses (join_code_used, join_code_revoked) when the
tombstone, the signed list or another node's valid claim says so, so a
bucket writer who puts the old sealed object back does not make a used code
work again. Every object is read with a byte cap and checked for shape.

A claim naming a node the primary lists is taken only with that node's leave,
signed by the keys it is listed with (in the claim, or its "left" status read
earlier in the same poll, fleet/roster.py): whoever holds an unused code cannot
take over a member's id. The refused claim still uses the code up.
"""

import logging
import re
from typing import TYPE_CHECKING

from contentnode.clock import rfc3339
from contentnode.core.s3_errors import S3Error
from contentnode.fleet import joincode, keys, members, roster
from contentnode.fleet.wire import Refused, b64, canonical, loads, unb64

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CLAIMS = "claims/"
LIST = "joins.json"
CLAIM_MAX_BYTES = 4 << 10
LIST_MAX_BYTES = 64 << 10      # 100 live codes and as many revoked ones, a few dozen bytes each
LIST_FORMAT = "contentnode-fleet-joins"
_ID = re.compile(r"^[0-9a-f]{16}$")
log = logging.getLogger("contentnode.fleet")


def claim_key(prefix: str, join_id: str) -> str:
    return f"{prefix}{CLAIMS}{join_id}.json"


def new_claim_key() -> tuple[str, str]:
    """(private half for the sealed payload, public half the primary keeps), base64."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    key = Ed25519PrivateKey.generate()
    return b64(keys.private_bytes(key)), keys.public_text(key)


def _claim_of(body: bytes, join_id: str, public: str) -> dict | None:
    """A claim's fields when it is well formed and signed by the code's claim key, else None."""
    try:
        doc = loads(body)
        if not isinstance(doc, dict) or set(doc) - {"keys", "left"} != {"id", "node_id", "claimed_at", "signature"} \
                or doc["id"] != join_id or not isinstance(doc["node_id"], str) or not _ID.match(doc["node_id"]):
            return None
        keys.verify(public, doc["signature"], canonical({k: v for k, v in doc.items() if k != "signature"}), "claim")
    except (ValueError, UnicodeDecodeError, TypeError, Refused):
        return None
    if "keys" in doc and members.public_of(doc["keys"]) is None or "left" in doc and not isinstance(doc["left"], dict):
        return None
    return doc


def _private(private_b64: str) -> "Ed25519PrivateKey":
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(unb64(private_b64, "claim key", 32))


def read_claim(client, prefix: str, join_id: str, public: str) -> dict | None:
    """The valid claim of a code in the bucket, or None (none, too large, malformed, forged)."""
    try:
        found = client.get_bytes(claim_key(prefix, join_id), max_bytes=CLAIM_MAX_BYTES)
    except S3Error as exc:
        if exc.code == "too_large":
            return None
        raise
    return _claim_of(found.body, join_id, public) if found is not None else None


def check_claim(client, prefix: str, join_id: str, private_b64: str, node_id: str) -> None:
    """On the joiner: Refused join_code_used when another node already claimed this code."""
    public = keys.public_text(_private(private_b64))
    claim = read_claim(client, prefix, join_id, public)
    if claim is not None and claim["node_id"] != node_id:
        raise Refused(*joincode.STATES["used"])


def write_claim(client, prefix: str, join_id: str, private_b64: str, node_id: str, now: float,
                public: dict, left: dict | None = None) -> None:
    """`left`: this node's signed leave of the same fleet, when it joins again (the primary
    takes a claim for a listed node id only after that node's leave)."""
    doc = {"id": join_id, "node_id": node_id, "claimed_at": rfc3339(now), "keys": public,
           **({"left": left} if left is not None else {})}
    doc["signature"] = keys.sign(_private(private_b64), canonical(doc))
    client.put_object(claim_key(prefix, join_id), canonical(doc), "application/json")


def check_list(client, prefix: str, fleet_id: str, signer_public: str, join_id: str, node_id: str) -> None:
    """On the joiner: Refused when the primary's signed list names this code used (by another
    node) or revoked. A list that is absent, too large or not signed by the primary is no answer."""
    try:
        found = client.get_bytes(prefix + LIST, max_bytes=LIST_MAX_BYTES)
    except S3Error as exc:
        if exc.code == "too_large":
            return
        raise
    if found is None:
        return
    try:
        doc = loads(found.body)
        if not isinstance(doc, dict) or doc.get("format") != LIST_FORMAT or doc.get("fleet_id") != fleet_id:
            return
        keys.verify(signer_public, doc.get("signature"),
                    canonical({k: v for k, v in doc.items() if k != "signature"}), "join list")
    except (ValueError, UnicodeDecodeError, TypeError, Refused):
        return
    used, revoked = doc.get("used"), doc.get("revoked")
    if isinstance(revoked, list) and join_id in revoked:
        raise Refused(*joincode.STATES["revoked"])
    if isinstance(used, dict) and join_id in used and used[join_id] != node_id:
        raise Refused(*joincode.STATES["used"])


def write_list(client, prefix: str, fleet_id: str, signing, codes: list, revoked: list, now: float) -> None:
    """joins.json: the used and revoked codes not yet expired, signed by the primary."""
    doc = {"format": LIST_FORMAT, "fleet_id": fleet_id, "issued_at": rfc3339(now),
           "used": {c["id"]: c["used_by"] for c in codes if c.get("used_by")},
           "revoked": sorted(c["id"] for c in revoked)}
    doc["signature"] = keys.sign(signing, canonical(doc))
    client.put_object(prefix + LIST, canonical(doc), "application/json")


def collect(client, prefix: str, codes: list, now: float) -> list:
    """On the primary: the ids of open codes (unused, unexpired) with a valid claim in the bucket,
    with the claiming node, its public member keys (None from a node before member keys) and
    its signed leave (None but on a rejoin): [(id, node_id, keys, left)]. One LIST, then a
    capped GET per claim of an open code."""
    open_codes = {c["id"]: c for c in codes if not c.get("used_at") and c.get("claim_public")
                  and c["id"] not in joincode.expired_ids([c], now)}
    if not open_codes:
        return []
    page = client.list_objects(prefix=prefix + CLAIMS, max_keys=1000)
    out = []
    for item in page.keys:
        join_id = item["key"][len(prefix + CLAIMS):].removesuffix(".json")
        if join_id in open_codes:
            claim = read_claim(client, prefix, join_id, open_codes[join_id]["claim_public"])
            if claim is not None:
                out.append((join_id, claim["node_id"], claim.get("keys"), claim.get("left")))
    return out


def left_by(doc, node_id: str, listed_row: dict | None) -> bool:
    """Whether `doc` is `node_id`'s leave signed by the keys it is listed with (no row: not listed)."""
    return listed_row is None or (isinstance(doc, dict) and doc.get("node_id") == node_id
                                  and doc.get("left") is True and members.signed_by(doc, listed_row.get("sign")))


def mark_used(fleet, client, found: list) -> bool:
    """Record each claimed code as used, tombstone its sealed object, republish joins.json and
    add the claiming nodes to the members, but not one claiming the id of a listed member
    without that member's signed leave (its code is used up all the same). Whether any was added."""
    state = fleet.state()
    prefix, now, listed = state["bucket"]["prefix"], fleet.clock.now(), state.get("members") or {}
    for join_id, _, _, _ in found:
        client.put_object(joincode.object_key(prefix, join_id), joincode.tombstone("used", join_id), "application/json")
    by_id = {join_id: node_id for join_id, node_id, _, _ in found}
    codes = [dict(c, used_at=rfc3339(now), used_by=by_id[c["id"]]) if c["id"] in by_id else c
             for c in state.get("join_codes") or []]
    publish_list(fleet, client, codes, state.get("join_revoked") or [])
    fleet.record(join_codes=codes)
    joined = {}
    for join_id, node_id, public, left in found:
        if not left_by(left, node_id, listed.get(node_id)):
            log.warning("fleet: join code %s names node %s, a member that has not left: claim refused, code used "
                        "up (whoever holds the code tried to take over that node's id)", join_id, node_id)
        elif public is not None:
            joined[node_id] = public
    roster.add(fleet, joined)
    fleet.republish()   # the bundle carries the codes' state (a promoted primary knows them)
    return bool(joined)


def publish_list(fleet, client, codes: list, revoked: list) -> None:
    state, secrets_ = fleet.state(), fleet.secrets()
    if secrets_ is None or secrets_.signing is None:
        raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
    write_list(client, state["bucket"]["prefix"], state["fleet_id"], secrets_.signing, codes, revoked,
               fleet.clock.now())
