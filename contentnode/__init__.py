"""contentnode: the administration daemon of a small content routing node."""

__version__ = "0.1.0"
