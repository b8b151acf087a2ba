"""The store's schema: every top-level section of the state document and its default.

Declared here, beside neither the handlers nor the App, so that the daemon
(contentnode.app) and the offline commands (contentnode.cli) read the same
schema and a `backup restore` run offline never imports the admin API.
"""

from contentnode.auth.policy import ACCOUNT_SECTIONS
from contentnode.auth.tokens import SECTIONS as TOKEN_SECTIONS
from contentnode.core import config_doc, signing
from contentnode.core.fleet_section import FLEET
from contentnode.store import Revisioned

SECTIONS = {
    **ACCOUNT_SECTIONS,                # users, policy
    "node": dict,                      # the node identity: id, verification secret, created_at
    "settings": dict,
    "notifications": dict,
    "update_status": dict,
    "domains": dict,
    "buckets": dict,
    "rules": dict,
    "links": signing.empty_ring,
    "https": dict,
    **TOKEN_SECTIONS,                  # api_tokens: hashes only
    "revisions": dict,                 # the revision of each object in REVISIONED.named, and the counter
    "fleet": FLEET.defaults,           # this node's fleet role and what it knows of the fleet, no key
    "fleet_purges": dict,              # a fleet primary's purge history (carried by its bundle)
    "backup_schedule": dict,           # the scheduled backup: when, which bucket, passphrase (in no backup)
    "backup_status": dict,             # the scheduled backup's last run (in no backup)
}

# The updatable objects (docs/API.md, "Revisions, ETag and If-Match"): each record of these sections, and each of
# these whole sections, carries a revision the store raises with every change.
REVISIONED = Revisioned(records=frozenset({"users", "domains", "buckets", "rules"}),
                        whole=frozenset({"settings", "policy", "notifications", "backup_schedule"}),
                        views={"config": (frozenset(config_doc.SECTIONS), config_doc.project)})
