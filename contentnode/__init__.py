"""contentnode: the administration daemon of a small content routing node."""

__version__ = "0.2.0"
