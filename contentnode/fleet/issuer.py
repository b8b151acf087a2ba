"""Certificates in a fleet are ordered once: on the primary, under a lease where the bucket allows.

- The capability probe (fleet/probe.py) runs at init and on demand; its result
  is kept in the fleet state and shown by GET /api/fleet. A failed probe is one
  notification (`fleet_probe_failed`, naming the node) until a probe passes.
- Issuance and renewal run on the primary only (a replica refuses the routes
  and renews nothing). Where the probe passed, the primary holds the issuer
  lease of the host (fleet/lease.py) while it orders; where it failed no
  lease is attempted and the primary is the only issuer.
- After taking the lease the issuer looks again before it orders: a
  certificate installed here meanwhile is answered as is; a bundle in the
  bucket at a higher key epoch (this node is no longer the primary) or with
  another certificate for the host than this node's (another node issued it)
  stops the order.
- HTTP-01: the primary publishes its answers to the bucket, signed
  (fleet/challenges.py); every member reads an answer it lacks through.
"""

from contextlib import ExitStack, contextmanager

from contentnode.core.s3_errors import S3Error
from contentnode.fleet import bundle, challenges, keys, publisher
from contentnode.fleet.lease import IssuerLeases
from contentnode.fleet.probe import probe
from contentnode.fleet.wire import Refused

MEMBER_ROLES = ("primary", "replica")


def run_probe(fleet) -> dict:
    """Probe the fleet's bucket, keep the result, notify when a failure starts."""
    state = fleet.state()
    if state.get("role") not in MEMBER_ROLES:
        raise Refused("not_in_fleet", "this node is not in a fleet")
    result = probe(fleet.client(), state["bucket"]["prefix"], fleet.clock.now())
    previous = state.get("probe") or {}
    fleet.record(probe=result)
    if not result["conditional_writes"] and previous.get("conditional_writes") is not False \
            and fleet.events is not None:
        failed = next((c for c in result["checks"] if not c["ok"]), {"name": "probe", "detail": "no check ran"})
        fleet.events.emit("fleet_probe_failed", node=fleet.node_id(), check=failed["name"], detail=failed["detail"])
    return result


def mode(state: dict) -> str | None:
    """How this node orders certificates: "lease", "primary_only" (no usable conditional
    writes, or not probed yet), or None when it does not order (standalone: alone; replica: never)."""
    if state.get("role") != "primary":
        return None
    return "lease" if (state.get("probe") or {}).get("conditional_writes") else "primary_only"


def _fingerprint(domains, host: str) -> str | None:
    record = domains.get(host) if isinstance(domains, dict) else None
    certificate = record.get("certificate") if isinstance(record, dict) else None
    return certificate.get("fingerprint") if isinstance(certificate, dict) else None


def _look_again(fleet, host: str, before: str | None) -> dict | None:
    """After taking the lease: this node's certificate if it changed since the order was asked
    for; Refused when the bucket shows another primary or another node's certificate."""
    state = fleet.state()
    local = fleet.store.data["domains"].get(host) or {}
    if _fingerprint(fleet.store.data["domains"], host) != before:
        return local.get("certificate")
    found = bundle.fetch(fleet.client(), state["bucket"]["prefix"] + publisher.BUNDLE, state["fleet_id"])
    if found is None or found.body is None:
        return None
    doc = bundle.parse(found.body, state["fleet_id"], keys.Pin(**state["pin"]))
    if bundle.key_epoch(doc) > state["pin"]["epoch"]:
        raise Refused("not_primary", "the bucket holds a bundle at a higher key epoch: another node is the "
                                     "primary now, so this one orders nothing")
    part = (doc["parts"].get("domains") or {}).get("data")
    published = _fingerprint(part, host)
    if doc.get("primary") != fleet.node_id() and published not in (None, before):
        raise Refused("issued_elsewhere", f"node {doc.get('primary')} published another certificate for {host}")
    return None


@contextmanager
def ordering(fleet, host: str, before: str | None):
    """Around one order for host: yields None to go ahead, or the certificate summary that
    is already there. LeaseHeld when another node holds the host's lease; Refused above."""
    state = fleet.state()
    if mode(state) != "lease":
        yield None
        return
    secrets_ = fleet.secrets()
    if secrets_ is None:
        raise Refused("no_secrets", "this node's fleet keys are missing from its data dir (fleet/)")
    leases = IssuerLeases(fleet.client(), state["bucket"]["prefix"], fleet.node_id(),
                          fleet.authority("lease"))
    with ExitStack() as held:
        try:
            held.enter_context(leases.holding(f"acme-{host}"))
            already = _look_again(fleet, host, before)
        except S3Error as exc:
            raise Refused("bucket_unreachable", f"the issuer lease cannot be taken: {exc.message}") from None
        yield already


def publishing_target(fleet):
    """(client, prefix, fleet_id, sign) while this node is the primary, else None."""
    state = fleet.state()
    secrets_ = fleet.secrets()
    if state.get("role") != "primary" or secrets_ is None or secrets_.signing is None:
        return None
    signing = secrets_.signing
    return fleet.client(), state["bucket"]["prefix"], state["fleet_id"], lambda data: keys.sign(signing, data)


def reading_source(fleet):
    """(client, prefix, fleet_id, verify) while this node is in a fleet, else None; answers
    verify under the signing key this node pinned last."""
    state = fleet.state()
    if state.get("role") not in MEMBER_ROLES or fleet.secrets() is None:
        return None
    public = state["pin"]["public_key"]

    def verify(data: bytes, signature) -> bool:
        try:
            keys.verify(public, signature, data, "ACME challenge")
        except Refused:
            return False
        return True

    return fleet.client(), state["bucket"]["prefix"], state["fleet_id"], verify


def challenge_store(fleet, local):
    """The store an order puts its HTTP-01 answers in: on the primary also the bucket."""
    return challenges.PublishingChallenges(local, lambda: publishing_target(fleet), fleet.clock.now)


def read_through(fleet) -> challenges.ReadThrough:
    return challenges.ReadThrough(lambda: reading_source(fleet), fleet.clock.now)

