"""The bodies a response can send besides bytes: a span of an open file, or a stream.

They live in core because the content cache's Result chooses which one its
object is sent as (core/cache_fill.py); http/response.py sends them.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass
class FileBody:
    """A byte range of an open file, sent with os.sendfile. `close` runs after sending."""

    fd: int
    offset: int
    length: int
    close: Callable[[], None] = lambda: None


@dataclass
class StreamBody:
    """Chunks produced while sending (e.g. an origin fetch filling the cache).

    `length` is promised up front; the server closes the connection if the
    chunks fall short, so a client never mistakes a truncated body for a whole one.
    """

    chunks: Iterable[bytes]
    length: int | None   # None: the origin announced none; the answer ends when the connection closes
    close: Callable[[], None] = lambda: None
