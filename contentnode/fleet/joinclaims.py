"""Single-use join codes: how the primary learns that a code was used, and how a
second joiner learns it too, and how the joiner's member keys reach the member list
(docs/API.md, Fleet).

Each code's sealed payload carries a claim key (Ed25519, made at mint; the
primary keeps only its public half). A joiner that completes a join first
writes claims/<id>.json, {"id","node_id","claimed_at","keys"} signed with it
("keys": the joiner's public member keys, fleet/members.py). At its next poll
the primary takes the first valid claim of each open code: the code is used by
that node, the node is added to the members (fleet/roster.py), its sealed object joins/<id> is overwritten with a
tombstone ({"id","state"}: the code's URL now opens nothing), and joins.json,
the list of used and revoked codes signed with the fleet's signing key, is
written again. A joiner refuses (join_code_used, join_code_revoked) when the
tombstone, the signed list or another node's valid claim says so, so a
bucket writer who puts the old sealed object back does not make a used code
work again. Every object is read with a byte cap and checked for shape.
"""

import re

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.clock import rfc3339
from contentnode.core.s3_errors import S3Error
from contentnode.fleet import joincode, keys, members, roster
from contentnode.fleet.wire import Refused, b64, canonical, loads, unb64

CLAIMS = "claims/"
LIST = "joins.json"
CLAIM_MAX_BYTES = 4 << 10
LIST_MAX_BYTES = 64 << 10      # 100 live codes and as many revoked ones, a few dozen bytes each
LIST_FORMAT = "contentnode-fleet-joins"
_ID = re.compile(r"^[0-9a-f]{16}$")


def claim_key(prefix: str, join_id: str) -> str:
    return f"{prefix}{CLAIMS}{join_id}.json"


def new_claim_key() -> tuple[str, str]:
    """(private half for the sealed payload, public half the primary keeps), base64."""
    key = Ed25519PrivateKey.generate()
    return b64(keys.private_bytes(key)), keys.public_text(key)


def _claim_of(body: bytes, join_id: str, public: str) -> dict | None:
    """A claim's fields when it is well formed and signed by the code's claim key, else None."""
    try:
        doc = loads(body)
        if not isinstance(doc, dict) or set(doc) - {"keys"} != {"id", "node_id", "claimed_at", "signature"} \
                or doc["id"] != join_id or not isinstance(doc["node_id"], str) or not _ID.match(doc["node_id"]):
            return None
        keys.verify(public, doc["signature"], canonical({k: v for k, v in doc.items() if k != "signature"}), "claim")
    except (ValueError, UnicodeDecodeError, TypeError, Refused):
        return None
    if "keys" in doc and members.public_of(doc["keys"]) is None:
        return None
    return doc


def _private(private_b64: str) -> Ed25519PrivateKey:
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
                public: dict) -> None:
    doc = {"id": join_id, "node_id": node_id, "claimed_at": rfc3339(now), "keys": public}
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
    with the claiming node and its public member keys (None from a node before member keys):
    [(id, node_id, keys)]. One LIST, then a capped GET per claim of an open code."""
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
                out.append((join_id, claim["node_id"], claim.get("keys")))
    return out


def mark_used(fleet, client, found: list) -> None:
    """Record each claimed code as used, tombstone its sealed object, republish joins.json and
    add the claiming nodes to the members."""
    state = fleet.state()
    prefix, now = state["bucket"]["prefix"], fleet.clock.now()
    for join_id, _, _ in found:
        client.put_object(joincode.object_key(prefix, join_id), joincode.tombstone("used", join_id), "application/json")
    by_id = {join_id: node_id for join_id, node_id, _ in found}
    codes = [dict(c, used_at=rfc3339(now), used_by=by_id[c["id"]]) if c["id"] in by_id else c
             for c in state.get("join_codes") or []]
    publish_list(fleet, client, codes, state.get("join_revoked") or [])
    fleet.record(join_codes=codes)
    roster.add(fleet, {node_id: public for _, node_id, public in found if public is not None})
    fleet.republish()   # the bundle carries the codes' state (a promoted primary knows them)


def publish_list(fleet, client, codes: list, revoked: list) -> None:
    state, secrets_ = fleet.state(), fleet.secrets()
    if secrets_ is None or secrets_.signing is None:
        raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
    write_list(client, state["bucket"]["prefix"], state["fleet_id"], secrets_.signing, codes, revoked,
               fleet.clock.now())
