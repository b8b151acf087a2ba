"""A fleet: many nodes, one configuration, through the operator's own bucket.

One primary publishes a signed bundle of what the fleet shares; replicas
poll it, verify it and apply it atomically (docs/API.md, Fleet). Modules:
wire (canonical bytes, Refused), keys (signing, recovery and fleet keys, key
epochs, the secret files), bundle (build, verify, open), shared (what is
shared and how it is applied), joincode, publisher (primary), follower
(replica), status (nodes/<id>.json), service (the role and its job), enrol
(init, join codes, join, leave).
"""

from contentnode.fleet.service import ready

__all__ = ["ready"]
