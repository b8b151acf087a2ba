"""What a public listener keeps of one connection (http/parking.py): its socket, its buffers and
where it stands (a new one, a head begun, an answer left to send, a request parsed for a pool
thread), and the one check the listener makes over several of a client's connections at once."""

import select

from contentnode.http.client_shares import client_key
from contentnode.http.connection import RequestHandler
from contentnode.http.sockio import SocketReader, SocketWriter


class Connection:
    """A connection the listener keeps: parked, or served by one pool thread."""

    __slots__ = ("sock", "address", "client", "since", "rfile", "wfile", "fresh", "head_due", "held", "unsent",
                 "then_close", "deferred")

    def __init__(self, sock, address, now: float):
        self.sock, self.address, self.since = sock, address, now
        self.client = client_key(address[0])   # what the per-client caps count
        self.rfile: SocketReader | None = None   # set by the pool thread that first serves it
        self.wfile: SocketWriter | None = None
        self.fresh = True                # no request yet: parked under header_timeout
        self.head_due: float | None = None   # a head begun and not yet whole must be by then
        self.held = 0                    # bytes of an unfinished head counted in the budget while parked
        self.unsent = b""                # of an answer the loop thread made: a pool thread sends it ...
        self.then_close = False          # ... and then closes the connection, or serves on
        self.deferred: RequestHandler | None = None   # a request the loop thread parsed, for a pool thread

    def holds_bytes(self) -> bool:
        """Bytes already read from the socket: parking would leave them unseen by epoll."""
        return bool(self.rfile and self.rfile.buffered()) or bool(getattr(self.sock, "pending", int)())


def peer_gone(conns) -> set:
    """Those of `conns` whose peer closed or reset the connection, even with a request still unread
    (POLLRDHUP, not readability: one poll(2) for all of them)."""
    probe, by_fd = select.poll(), {}
    for conn in conns:
        fd = conn.sock.fileno()
        by_fd[fd] = conn
        probe.register(fd, select.POLLRDHUP)
    return {by_fd[fd] for fd, _ in probe.poll(0)}
