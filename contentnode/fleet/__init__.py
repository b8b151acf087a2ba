"""The fleet: many nodes, one configuration, through the operator's own bucket."""
