"""Every outbound request of the node goes through here (docs/ARCHITECTURE.md, "Trust boundaries").

Domain checks, bucket checks, warm, probe, ACME, notifications and the update
check all reach out to addresses that an API caller chose. This module makes
that safe: only http and https, the name is resolved once and every address is
vetted (link-local and metadata, unspecified and multicast always refused;
loopback and private ranges refused when the policy says so; the node's own
admin port never), the connection goes to a vetted address (no second lookup
that DNS rebinding could change), connect and total timeouts apply, the
response size is capped and redirects are returned, never followed.
"""

import heapq
import http.client
import ipaddress
import itertools
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

from contentnode.core import dns
from contentnode.core.text import whole_number

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 1 << 20
# "This network" and the reserved class E block, which holds the limited broadcast 255.255.255.255.
RESERVED_NETWORKS = tuple(ipaddress.ip_network(n) for n in ("0.0.0.0/8", "240.0.0.0/4"))
# Cloud metadata services outside the link-local ranges (AWS over IPv6, Alibaba Cloud).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200"))
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# What may stay as it is in a request target; everything else (spaces, controls,
# non-ASCII) is percent-encoded, so http.client never sees, nor echoes, a bad target.
_TARGET_SAFE = "/?&=%:@!$'()*+,;~-._[]"


class OutboundError(Exception):
    """A refused or failed outbound request; `step` names where it failed."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step
        self.message = message


@dataclass(frozen=True)
class OutboundPolicy:
    """What the node may connect to.

    allow_private: loopback and private ranges allowed (an operator's own network).
    admin_ports: ports that must never be reached on a local address.
    dns_server: the one resolver of every outbound feature, when the operator names one.
    own_ports: the node's public ports, refused on a local address too (an origin there is a loop).
    """

    allow_private: bool = True
    admin_ports: frozenset = field(default_factory=frozenset)
    dns_server: str | None = None  # "ip[:port]" (setting dns_resolver); None: the system resolver
    own_ports: frozenset = field(default_factory=frozenset)

    @classmethod
    def for_node(cls, node_settings: dict, admin_port: int, dns_resolver: str) -> "OutboundPolicy":
        """The policy of a node with these stored settings, admin port and dns_resolver start-up value
        (the daemon's, and the offline commands' that reach a bucket)."""
        return cls(allow_private=node_settings.get("allow_private_outbound", True),
                   admin_ports=frozenset({admin_port}), dns_server=dns_resolver or None)


class NodeOutbound:
    """The running node's OutboundPolicy of the moment, called by every outbound feature; made again
    only when the stored settings or the admin port changed (every origin miss asks). A write replaces
    the settings section, never changes it in place, so the same section object means the same settings.

    settings(): the stored settings section; admin_port(): the admin port (bound now, or configured).
    """

    def __init__(self, settings, admin_port, dns_resolver: str):
        self._settings, self._admin_port, self._dns_resolver = settings, admin_port, dns_resolver
        self._made: tuple = (None, None, None)   # (settings, admin port, policy): read and replaced whole

    def __call__(self) -> OutboundPolicy:
        settings, port = self._settings(), self._admin_port()
        made_settings, made_port, policy = self._made
        if settings is not made_settings or made_port != port:
            policy = OutboundPolicy.for_node(settings, port, self._dns_resolver)
            self._made = (settings, port, policy)
        return policy


@dataclass
class FetchResult:
    status: int
    reason: str
    headers: dict  # lower-case names; repeated headers joined with ", "
    body: bytes
    elapsed_ms: float
    address: str
    peer_cert: bytes | None = None  # DER of the leaf certificate, https only
    timings: dict = field(default_factory=dict)


def _embedded_ipv4(ip) -> list:
    """IPv4 addresses an IPv6 address carries (mapped, NAT64, 6to4, Teredo, compatible)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return []
    found = []
    if ip.ipv4_mapped:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour:
        found.append(ip.sixtofour)
    if ip.teredo:
        found.extend(ip.teredo)
    if any(ip in net for net in _NAT64) or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _is_local_address(ip) -> bool:
    """True when `ip` is an address of this machine (binding to it succeeds)."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
        return True
    except OSError:
        return False


def _refusal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, policy: OutboundPolicy) -> str | None:
    """Why this address may not be contacted, or None when it may."""
    embedded = _embedded_ipv4(ip)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    for inner in embedded:
        if inner != ip:
            why = _refusal(inner, port, policy)
            if why:
                return f"{why} (carried inside the IPv6 address)"
    if ip.is_unspecified:
        return f"address {ip} is unspecified: refused"
    if ip.is_multicast:
        return f"address {ip} is multicast: refused"
    if any(ip in net for net in RESERVED_NETWORKS):
        return f"address {ip} is reserved or broadcast (0.0.0.0/8, 240.0.0.0/4): refused"
    if ip.is_link_local:
        return f"address {ip} is link-local (cloud metadata range): refused"
    if ip in METADATA_ADDRESSES:
        return f"address {ip} is a cloud metadata service: refused"
    if port in policy.admin_ports and (ip.is_loopback or _is_local_address(ip)):
        return "the admin port of this node is never a target"
    if port in policy.own_ports and (ip.is_loopback or _is_local_address(ip)):
        return f"port {port} on {ip} is this node's own public port: fetching from it would loop"
    if not policy.allow_private and (ip.is_loopback or ip.is_private or not ip.is_global):
        return f"address {ip} is private or loopback, and the outbound policy refuses those"
    return None


def _resolve(host: str, port: int, dns_server: str | None) -> list[str]:
    """Addresses of `host`, best first: the system's order, or the named DNS server's (A, then AAAA)."""
    try:
        if dns_server:
            found = dns.resolve(host, dns_server)
            addresses = found["A"] + found["AAAA"]
        else:
            addresses = [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except (socket.gaierror, dns.ResolveError, UnicodeError, ValueError) as exc:
        raise OutboundError("dns", f"name {host!r} did not resolve ({exc})") from None
    if not addresses:
        raise OutboundError("dns", f"name {host!r} did not resolve")
    return addresses


def vet_address(host: str, port: int, policy: OutboundPolicy) -> list[str]:
    """Resolve `host` and return the addresses that may be contacted, best first.

    Raises OutboundError("dns", ...) when the name does not resolve and
    OutboundError("address", ...) when every address it resolves to is refused.
    """
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        candidates = [literal]
    except ValueError:
        candidates = []
        for text in _resolve(host, port, policy.dns_server):
            ip = ipaddress.ip_address(text.split("%")[0])
            if ip not in candidates:
                candidates.append(ip)
    allowed: list[str] = []
    refusals: list[str] = []
    for ip in candidates:
        why = _refusal(ip, port, policy)
        (refusals if why else allowed).append(why or str(ip))
    if not allowed:
        raise OutboundError("address", refusals[0])
    return allowed


def connect_vetted(host: str, port: int, policy: OutboundPolicy, timeout: float) -> socket.socket:
    """A TCP connection to a vetted address of `host`, resolved now (no earlier answer that DNS
    rebinding could have changed since); OutboundError on refusal or failure."""
    sock = _connect_any(vet_address(host, port, policy), port, timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _connect_any(addresses: list[str], port: int, timeout: float) -> socket.socket:
    last = OutboundError("connect", "no address to connect to")
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout=timeout)
        except TimeoutError:
            last = OutboundError("connect", f"connection to {address} port {port} timed out after {timeout:g} s")
        except ConnectionRefusedError:
            last = OutboundError("connect", f"connection refused by {address} port {port}")
        except OSError as exc:
            last = OutboundError("connect", f"cannot connect to {address} port {port}: {exc.strerror or exc}")
    raise last


class _Deadlines:
    """One thread that shuts down connections whose total time is up.

    A socket timeout only bounds each single wait: a peer that sends one byte
    just before every timeout keeps a request alive for ever. Shutting the
    connection down at its deadline wakes any read in progress (it sees the
    end of the stream), whatever http.client, ssl or smtplib is doing.
    The watchdog holds a duplicate of the socket, so it works across the TLS
    wrap and can never shut down a descriptor that was reused meanwhile.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._heap = []
        self._seq = itertools.count()
        self._thread = None

    def arm(self, sock: socket.socket, deadline: float) -> "DeadlineGuard":
        guard = DeadlineGuard(self, socket.socket(fileno=os.dup(sock.fileno())))
        self.rearm(guard, deadline)
        return guard

    def rearm(self, guard: "DeadlineGuard", deadline: float) -> None:
        with self._cond:
            guard.deadline = deadline
            guard.generation += 1
            heapq.heappush(self._heap, (deadline, next(self._seq), guard, guard.generation))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="outbound-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()

    def cancel(self, guard: "DeadlineGuard") -> None:
        # closing under the lock: the watchdog never shuts down a descriptor number
        # that was closed (and perhaps reused) meanwhile
        with self._cond:
            guard.generation += 1
            sock, guard.sock = guard.sock, None
            if sock is not None:
                sock.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, guard, generation = heapq.heappop(self._heap)
                if generation != guard.generation or guard.sock is None:
                    continue
                guard.fired = True
                try:
                    guard.sock.shutdown(socket.SHUT_RDWR)  # never blocks
                except OSError:
                    pass


@dataclass(eq=False)
class DeadlineGuard:
    """A connection's deadline; `fired` once the watchdog cut the connection."""

    owner: _Deadlines
    sock: socket.socket | None
    deadline: float = 0.0
    generation: int = 0
    fired: bool = False

    def cancel(self) -> None:
        self.owner.cancel(self)


DEADLINES = _Deadlines()


class _Pinned:
    """Shared by the pinned connections: a vetted address and an optional total deadline."""

    _guard: DeadlineGuard | None = None
    _deadline: float | None = None
    _cut = False  # the watchdog cut this connection (kept after close)
    # set by the http.client connection class this is mixed into, or by its __init__:
    sock: socket.socket | None
    port: int
    timeout: float | None
    _addresses: list[str]

    def set_deadline(self, deadline: float | None) -> None:
        """Cut the connection at `deadline` (time.monotonic()), whatever it is doing then."""
        self._deadline = deadline
        if deadline is None:
            if self._guard is not None:
                self._cut = self._cut or self._guard.fired
                self._guard.cancel()
                self._guard = None
        elif self._guard is not None:
            DEADLINES.rearm(self._guard, deadline)
        elif self.sock is not None:
            self._guard = DEADLINES.arm(self.sock, deadline)

    def deadline_passed(self) -> bool:
        return self._cut or (self._guard is not None and self._guard.fired) or (
            self._deadline is not None and time.monotonic() >= self._deadline)

    def _connect_pinned(self) -> socket.socket:
        # http.client allows None (wait for ever); open_connection always gives a bound
        sock = _connect_any(self._addresses, self.port, DEFAULT_TIMEOUT if self.timeout is None else self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._deadline is not None:
            self._guard = DEADLINES.arm(sock, self._deadline)
        return sock

    def close(self):
        super().close()
        if self._guard is not None:
            self._cut = self._cut or self._guard.fired
            self._guard.cancel()
            self._guard = None


class _PinnedHTTPConnection(_Pinned, http.client.HTTPConnection):
    """An HTTP connection to an already vetted address, Host header naming the host."""

    def __init__(self, host, port, addresses, timeout, deadline=None):
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses
        self._deadline = deadline

    def connect(self):
        self.sock = self._connect_pinned()


class _PinnedHTTPSConnection(_Pinned, http.client.HTTPSConnection):
    """An HTTPS connection to a vetted address; SNI and verification use the host name."""

    def __init__(self, host, port, addresses, timeout, context, deadline=None):
        super().__init__(host, port, timeout=timeout, context=context)
        self._addresses = addresses
        self._deadline = deadline

    def connect(self):
        sock = self._connect_pinned()
        try:
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise OutboundError("tls", f"certificate not trusted: {exc.verify_message}") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            if self.deadline_passed():
                raise OutboundError("timeout", "the TLS handshake did not complete in time") from None
            raise OutboundError("tls", f"TLS handshake failed: {exc}") from None


def default_tls_context() -> ssl.SSLContext:
    """System trust store, TLS 1.2 or newer."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def open_connection(scheme: str, host: str, port: int | None, policy: OutboundPolicy,
                    timeout: float = DEFAULT_TIMEOUT, ssl_context: ssl.SSLContext | None = None,
                    deadline: float | None = None):
    """A connected http.client connection to a vetted address of `host`.

    With `deadline` (time.monotonic()), the connection is cut when it passes,
    TLS handshake included; `conn.set_deadline()` moves it for a later request.
    """
    if scheme not in ("http", "https"):
        raise OutboundError("url", f"scheme {scheme!r} is not allowed: only http and https")
    port = port or (443 if scheme == "https" else 80)
    addresses = vet_address(host, port, policy)
    conn: _PinnedHTTPConnection | _PinnedHTTPSConnection
    if scheme == "https":
        conn = _PinnedHTTPSConnection(host, port, addresses, timeout, ssl_context or default_tls_context(),
                                      deadline)
    else:
        conn = _PinnedHTTPConnection(host, port, addresses, timeout, deadline)
    try:
        conn.connect()
    except BaseException:
        conn.close()
        raise
    return conn


def safe_target(target: str) -> str:
    """A request target with spaces, control and non-ASCII characters percent-encoded (UTF-8)."""
    return quote(target, safe=_TARGET_SAFE)


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path-with-query) of an http(s) URL, or OutboundError("url")."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise OutboundError("url", f"malformed URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise OutboundError("url", f"scheme {parts.scheme!r} is not allowed: only http and https")
    if not parts.hostname:
        raise OutboundError("url", "the URL has no host")
    if parts.username or parts.password:
        raise OutboundError("url", "credentials in the URL are not allowed")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), safe_target(path)


HEAD_CHECK_BYTES = 4096


def read_capped(response, max_bytes: int, deadline: float, head_check=None) -> bytes:
    """Read a response body, refusing more than max_bytes or reading past the deadline.

    `head_check(first bytes)` (at most HEAD_CHECK_BYTES) may raise to stop reading as soon as
    the start shows the body is not what the caller expects (junk is never read whole)."""
    length = response.getheader("Content-Length")
    declared = whole_number(length) if length and length.isascii() and length.isdigit() else None
    if length and length.isascii() and length.isdigit() and (declared is None or declared > max_bytes):
        raise OutboundError("response", f"response of {length[:20]} bytes is larger than the {max_bytes} byte cap")
    chunks: list[bytes] = []
    total = 0
    while True:
        if time.monotonic() > deadline:
            raise OutboundError("timeout", "the response did not complete in time")
        chunk = response.read(min(65536, max_bytes + 1 - total))
        if head_check is not None and (not chunk or total + len(chunk) >= HEAD_CHECK_BYTES):
            head_check((b"".join(chunks) + chunk)[:HEAD_CHECK_BYTES])
            head_check = None
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise OutboundError("response", f"response is larger than the {max_bytes} byte cap")
        chunks.append(chunk)


def fetch(url: str, policy: OutboundPolicy, method: str = "GET", headers: dict | None = None,
          body: bytes | None = None, timeout: float = DEFAULT_TIMEOUT,
          max_bytes: int = DEFAULT_MAX_BYTES, ssl_context: ssl.SSLContext | None = None) -> FetchResult:
    """One bounded request; redirects are answered as they are (see `Location`).

    `timeout` bounds each wait and the whole request (connect to last byte).
    Error messages never repeat the URL's path or query (a bot token lives there).
    """
    scheme, host, port, path = split_url(url)
    started = time.monotonic()
    deadline = started + timeout
    timings = {}
    conn = None
    try:
        conn = open_connection(scheme, host, port, policy, timeout, ssl_context, deadline)
        timings["connect_ms"] = round((time.monotonic() - started) * 1000, 1)
        # read now: http.client drops the socket once a "Connection: close" answer is read
        peer = conn.sock.getpeercert(binary_form=True) if scheme == "https" else None
        address = conn.sock.getpeername()[0]
        send_headers = {"User-Agent": "contentnode", "Connection": "close"}
        send_headers.update(headers or {})
        conn.request(method, path, body=body, headers=send_headers)
        response = conn.getresponse()
        timings["first_byte_ms"] = round((time.monotonic() - started) * 1000, 1)
        data = b"" if method == "HEAD" else read_capped(response, max_bytes, deadline)
        if conn.deadline_passed():
            raise OutboundError("timeout", f"the request did not complete within {timeout:g} s")
        merged: dict[str, str] = {}
        for name, value in response.getheaders():
            key = name.lower()
            merged[key] = f"{merged[key]}, {value}" if key in merged else value
        elapsed = round((time.monotonic() - started) * 1000, 1)
        timings["total_ms"] = elapsed
        return FetchResult(response.status, response.reason, merged, data, elapsed, address, peer, timings)
    except OutboundError:
        raise
    except TimeoutError:
        raise OutboundError("timeout", f"no answer within {timeout:g} s") from None
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if conn is not None and conn.deadline_passed():
            raise OutboundError("timeout", f"the request did not complete within {timeout:g} s") from None
        raise OutboundError("response", f"the server's answer could not be read: {_describe(exc)}") from None
    finally:
        if conn is not None:
            conn.close()


def _describe(exc: BaseException) -> str:
    """A failure's text without the request target or headers (http.client repeats them)."""
    if isinstance(exc, http.client.InvalidURL) or (isinstance(exc, ValueError) and not isinstance(exc, OSError)):
        return f"the request could not be sent ({type(exc).__name__})"
    return str(exc) or type(exc).__name__
