"""The readiness rule (docs/ARCHITECTURE.md, "Health"): may this node's public side report healthy?

In core, so that the public /healthz stage (public/health.py) and the fleet's
status both ask the same rule of the state document every process follows.
"""

from contentnode.core.fleet_section import state_of


def not_ready(doc) -> bool:
    """A fleet replica that has never applied a bundle has nothing to serve. Without a `fleet`
    section a node is ready."""
    state = state_of(doc)
    return state["role"] == "replica" and not state.get("applied_at")
