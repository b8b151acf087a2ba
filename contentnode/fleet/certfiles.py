"""Certificates in the bundle: every node of a fleet presents the primary's certificates.

The primary's certificate files (<data dir>/certs/<host>.pem: key, then
chain), uploaded or issued, travel in the bundle's sealed part
"certificates" ({host: {"key_pem", "chain_pem"}}); the domain records in the
"domains" part carry their summaries as on any node. A replica checks every
pair (the key belongs to the leaf, the leaf covers the host, the chain is in
order; not the dates, since it serves what its primary serves) together with
the rest of the bundle, then writes the files that changed and removes the
ones the fleet no longer has. The HTTPS listener picks each new file up at
the next handshake (core/certs.py SniSelector), without a restart. Renewal
runs on the primary only, so a certificate is ordered once for the fleet.
"""

from contentnode.core import certs
from contentnode.fleet.wire import Refused


def read(store: certs.CertStore, domains) -> dict:
    """The part for a state document's domains: each domain's file, when it has a certificate."""
    out = {}
    for host, record in domains.items():
        if not record["certificate"]:
            continue
        found = store.read(host)
        if found is not None:
            out[host] = {"key_pem": found[0], "chain_pem": found[1]}
    return out


def check(part, domains, store: certs.CertStore) -> dict:
    """{host: certs.Bundle, or None when this node's file already holds exactly that pair} for a
    bundle's part; Refused when any entry is not a usable pair for one of the bundle's domains.
    Unchanged pairs are not parsed again, so an apply costs the certificates that changed."""
    if not isinstance(part, dict):
        raise Refused("malformed", "the certificates part is not an object")
    checked: dict = {}
    for host, entry in part.items():
        if host not in domains:
            raise Refused("restore_checks", f"a certificate for {host}, which is not one of the fleet's domains")
        if not isinstance(entry, dict):
            raise Refused("malformed", f"the certificate entry of {host} is not an object")
        if store.read(host) == (entry.get("key_pem"), entry.get("chain_pem")):
            checked[host] = None
            continue
        try:
            checked[host] = certs.validate_bundle(host, entry.get("chain_pem"), entry.get("key_pem"), None)
        except certs.CertError as exc:
            raise Refused("restore_checks", f"the certificate of {host} is unusable: {exc}") from None
    return checked


def install(store: certs.CertStore, checked: dict) -> int:
    """Write the files that differ (before the records change: a crash between serves the newer
    files under the older records, which still name every host); how many were written."""
    written = 0
    for host, bundle in checked.items():
        if bundle is not None:   # check() left None where the file already holds this pair
            store.save(host, bundle)
            written += 1
    return written


def prune(store: certs.CertStore, checked: dict) -> int:
    """Remove the files of hosts without a certificate in the bundle, once the records no longer
    need them (a crash before leaves the old records with every file they serve); how many."""
    gone = [host for host in store.hosts() if host not in checked]
    for host in gone:
        store.delete(host)
    return len(gone)
