"""What one client address may hold of a public listener (http/parking.py).

Without caps per client, a few addresses could take every connection slot
(silent sockets) or every pool thread (slow readers) and deny everyone else.
A client is its address, or its /64 for IPv6 (one host's usual share); a peer
that is a trusted proxy (`uncapped`) is not counted, as its clients only
differ in X-Forwarded-For, which comes with each request. Every method runs
under the listener's lock.
"""

import collections
import ipaddress


def client_key(ip: str) -> str:
    """What the per-client caps count: the address, or its /64 for IPv6 (one host's usual share)."""
    if ":" not in ip:
        return ip
    try:
        address = ipaddress.IPv6Address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


class ClientShares:
    """Per client: open connections (at most `per_client`) and connections a pool thread holds
    (at most `requests_per_client`; the others wait here, woken, in arrival order)."""

    def __init__(self, per_client: int, requests_per_client: int, uncapped=None):
        self.per_client, self.requests_per_client = per_client, requests_per_client
        self._uncapped = uncapped or (lambda ip: False)
        self._open: dict[str, int] = {}   # client -> open connections
        self._in_service: dict[str, int] = {}   # client -> connections a pool thread holds
        self.waiting: dict[str, collections.deque] = {}   # client -> woken connections, over its share
        self.busy = 0   # connections a pool thread holds, all clients

    def full(self, client: str, ip: str) -> bool:
        """`client` already holds its connections (a trusted proxy never does)."""
        return self._open.get(client, 0) >= self.per_client and not self._uncapped(ip)

    def opened(self, client: str) -> None:
        self._open[client] = self._open.get(client, 0) + 1

    def closed(self, client: str) -> None:
        _count_down(self._open, client)

    def take_thread(self, conn) -> bool:
        """Count `conn` as served unless its client already holds its share of the pool."""
        serving = self._in_service.get(conn.client, 0)
        if serving >= self.requests_per_client and not self._uncapped(conn.address[0]):
            return False
        self._in_service[conn.client] = serving + 1
        self.busy += 1
        return True

    def wait(self, conn) -> None:
        """`conn` has a request but its client holds its share: it waits for one of them to end."""
        self.waiting.setdefault(conn.client, collections.deque()).append(conn)

    def release_thread(self, conn):
        """`conn` leaves its thread: the next waiting connection of its client (now counted), or None."""
        self.busy -= 1
        _count_down(self._in_service, conn.client)
        waiting = self.waiting.get(conn.client)
        if not waiting:
            return None
        following = waiting.popleft()
        if not waiting:
            del self.waiting[conn.client]
        self.take_thread(following)
        return following

    def drop_gone(self, client: str, gone) -> list:
        """The waiting connections of `client` that `gone(connections)` names (their peer closed or
        reset them), forgotten here: the listener closes them rather than serve nobody."""
        waiting = self.waiting.get(client)
        if not waiting:
            return []
        dropped = gone(waiting)
        if dropped:
            kept = [conn for conn in waiting if conn not in dropped]
            if kept:
                self.waiting[client] = collections.deque(kept)
            else:
                del self.waiting[client]
        return list(dropped)

    def drop_waiting(self) -> list:
        """Every waiting connection, forgotten here (the listener closes them)."""
        dropped = [conn for waiting in self.waiting.values() for conn in waiting]
        self.waiting.clear()
        return dropped


def _count_down(counts: dict[str, int], client: str) -> None:
    """One fewer for `client`; a client at zero leaves the table (it stays as small as the clients)."""
    left = counts.get(client, 1) - 1
    if left:
        counts[client] = left
    else:
        counts.pop(client, None)
