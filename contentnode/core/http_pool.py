"""Kept-alive connections to one HTTP(S) origin, bounded, and the pools of every origin.

An origin answer costs a TCP (and TLS) handshake unless a connection is
reused, so each origin has a pool: connections go back to it once their
answer was read whole, and a TLS connection offers the origin's last session
for resumption. Every connect resolves the host again and vets the address
(core/netguard.py connect_vetted), so a name re-pointed at a refused address
(the node's own ports, link-local/metadata) is refused at that connect.

Timeouts are per step: `connect_timeout` bounds the TCP connect and the TLS
handshake, `read_timeout` each wait for the origin's next bytes (sending
included), never the whole answer: a large or slow answer that keeps
moving is never cut.

A slow or dead origin holds at most `MAX_ACTIVE` threads of the node on its
connections, plus at most `MAX_WAITING` waiting (up to the connect timeout)
for one of them to come free; any more get OriginError "busy" at once.
"""

import select
import socket
import ssl
import threading
import time
from collections import OrderedDict

from contentnode.core import netguard
from contentnode.core.origin import OriginError

MAX_ACTIVE = 32          # connections in use at once, per origin
MAX_WAITING = 32         # requests waiting for one of them, per origin
READ_BUFFER = 64 * 1024  # bytes read from the origin at once, per connection
IDLE_SECONDS = 30.0      # an idle connection older than this is closed, not reused
MAX_POOLS = 256          # origins whose pools are kept (the least recently used go)


def tls_context(verify: bool) -> ssl.SSLContext:
    """The system trust store (netguard's rules), or no verification at all for tls_verify false."""
    if verify:
        return netguard.default_tls_context()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def transport_error(exc: BaseException) -> OriginError:
    """An OriginError an operator can act on, from a failure of the way to the origin."""
    if isinstance(exc, OriginError):
        return exc
    if isinstance(exc, netguard.OutboundError):
        code = {"dns": "dns", "address": "refused_address", "connect": "connect", "tls": "tls",
                "timeout": "timeout"}.get(exc.step, "protocol")
        return OriginError(code, exc.message)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return OriginError("tls", f"certificate not trusted: {exc.verify_message}")
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return OriginError("timeout", "the origin sent nothing within the read timeout")
    if isinstance(exc, ssl.SSLError):
        hint = " (the port answers plain HTTP: is the url http://?)" if exc.reason == "WRONG_VERSION_NUMBER" else ""
        return OriginError("tls", f"TLS failed: {exc.reason or exc}{hint}")
    return OriginError("connect", f"the connection to the origin failed: {exc.strerror or exc}"
                       if isinstance(exc, OSError) else str(exc))


class OriginConnection:
    """One connection of a pool: vetted at connect, TLS with the pool's last session offered;
    `reader` buffers what the origin sends (core/origin_wire.py reads answers from it)."""

    def __init__(self, pool: "OriginPool"):
        self.pool = pool
        self.sock: socket.socket | None = None
        self.reader = None
        self.resumed = False
        self.idle_since = 0.0
        self.tls: ssl.SSLSocket | None = None

    def connect(self):
        pool = self.pool
        sock = netguard.connect_vetted(pool.host, pool.port, pool.policy, pool.connect_timeout)
        if pool.context is not None:
            sock.settimeout(pool.connect_timeout)
            try:
                sock = pool.context.wrap_socket(sock, server_hostname=pool.host, session=pool.session)
            except ssl.SSLCertVerificationError as exc:
                sock.close()
                raise OriginError("tls", f"the origin's certificate is not trusted: {exc.verify_message}") from None
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                if isinstance(exc, (TimeoutError, socket.timeout)):
                    raise OriginError("timeout", f"the TLS handshake did not complete within "
                                                 f"{pool.connect_timeout:g} s") from None
                raise OriginError("tls", f"the TLS handshake failed: {exc}") from None
            self.resumed = sock.session_reused
            self.tls = sock
        sock.settimeout(pool.read_timeout)
        self.sock = sock
        self.reader = sock.makefile("rb", READ_BUFFER)

    def close(self) -> None:
        sock, reader, self.sock, self.reader = self.sock, self.reader, None, None
        if reader is not None:
            reader.close()
        if sock is not None:
            sock.close()

    def has_more(self) -> bool:
        """Whether bytes past the answer just read are already here, in the reader's buffer (where
        alive()'s look at the socket cannot see them) or on the socket; never waits. A look that
        fails (TLS that cannot read what came, a reset) says yes: the connection is not reused."""
        sock, reader = self.sock, self.reader
        if sock is None or reader is None:
            return False
        timeout = sock.gettimeout()
        sock.settimeout(0)
        try:
            return bool(reader.peek())
        except (BlockingIOError, ssl.SSLWantReadError):   # nothing came
            return False
        except OSError:   # what came could not be read: the next answer would fail on it
            return True
        finally:
            sock.settimeout(timeout)

    def alive(self) -> bool:
        """Idle and usable: connected, not too old, and nothing (EOF or stray bytes) to read."""
        if self.sock is None or time.monotonic() - self.idle_since > IDLE_SECONDS:
            return False
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return False
        probe = select.poll()   # not select.select, which refuses a descriptor past 1,023
        try:
            probe.register(self.sock, select.POLLIN)
            return not probe.poll(0)   # readable, hung up or failed: not usable
        except (OSError, ValueError):
            return False


class OriginPool:
    """The kept-alive connections to one origin (scheme, host, port, TLS verification, timeouts)."""

    def __init__(self, scheme: str, host: str, port: int, tls_verify: bool, connect_timeout: float,
                 read_timeout: float, policy: netguard.OutboundPolicy):
        self.host, self.port = host, port
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.policy = policy
        self.context = tls_context(tls_verify) if scheme == "https" else None
        self.session: ssl.SSLSession | None = None
        self._idle: list[OriginConnection] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_ACTIVE)
        self._waiting = 0
        self.opened = self.reused = self.resumed = 0   # counters for diagnosis and tests

    def acquire(self) -> tuple[OriginConnection, bool]:
        """A connection (idle one first) and whether it was reused; OriginError "busy" when the
        origin's share of connections stays taken."""
        if not self._slots.acquire(blocking=False):
            with self._lock:
                if self._waiting >= MAX_WAITING:
                    raise OriginError("busy", f"all {MAX_ACTIVE} connections to the origin are busy and "
                                              f"{MAX_WAITING} requests already wait for one")
                self._waiting += 1
            try:
                got = self._slots.acquire(timeout=self.connect_timeout)
            finally:
                with self._lock:
                    self._waiting -= 1
            if not got:
                raise OriginError("busy", f"all {MAX_ACTIVE} connections to the origin stayed busy for "
                                          f"{self.connect_timeout:g} s")
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if conn.alive():
                with self._lock:
                    self.reused += 1
                return conn, True
            conn.close()
        conn = OriginConnection(self)
        try:
            conn.connect()
        except BaseException as exc:
            conn.close()
            self._slots.release()
            raise transport_error(exc) from None
        with self._lock:
            self.opened += 1
            self.resumed += conn.resumed
        return conn, False

    def release(self, conn: OriginConnection, reusable: bool) -> None:
        """Give a connection back: kept when its answer was read whole and it may stay open."""
        if reusable and conn.sock is not None:
            conn.idle_since = time.monotonic()
            with self._lock:
                self._idle.append(conn)
        else:
            conn.close()
        self._slots.release()

    def remember_session(self, conn: OriginConnection) -> None:
        """Keep the connection's TLS session for the next connect to resume: read once an answer
        began to arrive, since TLS 1.3 sends its session tickets after the handshake."""
        if conn.tls is not None:
            try:
                self.session = conn.tls.session or self.session
            except (AttributeError, ValueError):
                pass

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class OriginPools:
    """The pool of every origin in use, by its connection settings (made in the composition root:
    one per process, shared by the content path, check and test)."""

    def __init__(self) -> None:
        self._pools: OrderedDict[tuple, OriginPool] = OrderedDict()
        self._lock = threading.Lock()

    def pool(self, scheme: str, host: str, port: int, tls_verify: bool, connect_timeout: float,
             read_timeout: float, policy: netguard.OutboundPolicy) -> OriginPool:
        key = (scheme, host, port, tls_verify, connect_timeout, read_timeout)
        with self._lock:
            found = self._pools.get(key)
            if found is None:
                found = self._pools[key] = OriginPool(scheme, host, port, tls_verify, connect_timeout,
                                                      read_timeout, policy)
            self._pools.move_to_end(key)
            found.policy = policy   # the settings may have changed: every connect uses the current one
            evicted = self._pools.popitem(last=False)[1] if len(self._pools) > MAX_POOLS else None
        if evicted is not None:
            evicted.close()
        return found

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            pool.close()
