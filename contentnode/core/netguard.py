"""Every outbound request of the node goes through here (DESIGN §6).

Domain checks, bucket checks, warm, probe, ACME, notifications and the update
check all reach out to addresses that an API caller chose. This module makes
that safe: only http and https, the name is resolved once and every address is
vetted (link-local and metadata, unspecified and multicast always refused;
loopback and private ranges refused when the policy says so; the node's own
admin port never), the connection goes to a vetted address (no second lookup
that DNS rebinding could change), connect and total timeouts apply, the
response size is capped and redirects are returned, never followed.
"""

import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 1 << 20


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
    """

    allow_private: bool = True
    admin_ports: frozenset = field(default_factory=frozenset)


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


def _refusal(ip: ipaddress._BaseAddress, port: int, policy: OutboundPolicy) -> str | None:
    """Why this address may not be contacted, or None when it may."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return f"address {ip} is unspecified: refused"
    if ip.is_multicast:
        return f"address {ip} is multicast: refused"
    if ip.is_link_local:
        return f"address {ip} is link-local (cloud metadata range): refused"
    if ip.is_loopback and port in policy.admin_ports:
        return "the admin port of this node is never a target"
    if not policy.allow_private and (ip.is_loopback or ip.is_private or not ip.is_global):
        return f"address {ip} is private or loopback, and the outbound policy refuses those"
    return None


def vet_address(host: str, port: int, policy: OutboundPolicy) -> list[str]:
    """Resolve `host` and return the addresses that may be contacted, best first.

    Raises OutboundError("dns", ...) when the name does not resolve and
    OutboundError("address", ...) when every address it resolves to is refused.
    """
    try:
        literal = ipaddress.ip_address(host.strip("[]"))
        candidates = [literal]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise OutboundError("dns", f"name {host!r} did not resolve ({exc})") from None
        seen = []
        for info in infos:
            ip = ipaddress.ip_address(info[4][0].split("%")[0])
            if ip not in seen:
                seen.append(ip)
        candidates = seen
    allowed, refusals = [], []
    for ip in candidates:
        why = _refusal(ip, port, policy)
        (refusals if why else allowed).append(why or str(ip))
    if not allowed:
        raise OutboundError("address", refusals[0])
    return allowed


def _connect_any(addresses: list[str], port: int, timeout: float) -> socket.socket:
    last = None
    for address in addresses:
        try:
            return socket.create_connection((address, port), timeout=timeout)
        except socket.timeout:
            last = OutboundError("connect", f"connection to {address} port {port} timed out after {timeout:g} s")
        except ConnectionRefusedError:
            last = OutboundError("connect", f"connection refused by {address} port {port}")
        except OSError as exc:
            last = OutboundError("connect", f"cannot connect to {address} port {port}: {exc.strerror or exc}")
    raise last


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to an already vetted address, Host header naming the host."""

    def __init__(self, host, port, addresses, timeout):
        super().__init__(host, port, timeout=timeout)
        self._addresses = addresses

    def connect(self):
        self.sock = _connect_any(self._addresses, self.port, self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """An HTTPS connection to a vetted address; SNI and verification use the host name."""

    def __init__(self, host, port, addresses, timeout, context):
        super().__init__(host, port, timeout=timeout, context=context)
        self._addresses = addresses

    def connect(self):
        sock = _connect_any(self._addresses, self.port, self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise OutboundError("tls", f"certificate not trusted: {exc.verify_message}") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise OutboundError("tls", f"TLS handshake failed: {exc}") from None


def default_tls_context() -> ssl.SSLContext:
    """System trust store, TLS 1.2 or newer."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def open_connection(scheme: str, host: str, port: int | None, policy: OutboundPolicy,
                    timeout: float = DEFAULT_TIMEOUT, ssl_context: ssl.SSLContext | None = None):
    """A connected http.client connection to a vetted address of `host`."""
    if scheme not in ("http", "https"):
        raise OutboundError("url", f"scheme {scheme!r} is not allowed: only http and https")
    port = port or (443 if scheme == "https" else 80)
    addresses = vet_address(host, port, policy)
    if scheme == "https":
        conn = _PinnedHTTPSConnection(host, port, addresses, timeout, ssl_context or default_tls_context())
    else:
        conn = _PinnedHTTPConnection(host, port, addresses, timeout)
    conn.connect()
    return conn


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
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80), path


def read_capped(response, max_bytes: int, deadline: float) -> bytes:
    """Read a response body, refusing more than max_bytes or reading past the deadline."""
    length = response.getheader("Content-Length")
    if length and length.isdigit() and int(length) > max_bytes:
        raise OutboundError("response", f"response of {int(length)} bytes is larger than the {max_bytes} byte cap")
    chunks, total = [], 0
    while True:
        if time.monotonic() > deadline:
            raise OutboundError("timeout", "the response did not complete in time")
        chunk = response.read(min(65536, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > max_bytes:
            raise OutboundError("response", f"response is larger than the {max_bytes} byte cap")
        chunks.append(chunk)


def fetch(url: str, policy: OutboundPolicy, method: str = "GET", headers: dict | None = None,
          body: bytes | None = None, timeout: float = DEFAULT_TIMEOUT,
          max_bytes: int = DEFAULT_MAX_BYTES, ssl_context: ssl.SSLContext | None = None) -> FetchResult:
    """One bounded request; redirects are answered as they are (see `Location`)."""
    scheme, host, port, path = split_url(url)
    started = time.monotonic()
    deadline = started + timeout
    timings = {}
    conn = None
    try:
        conn = open_connection(scheme, host, port, policy, timeout, ssl_context)
        timings["connect_ms"] = round((time.monotonic() - started) * 1000, 1)
        send_headers = {"User-Agent": "contentnode", "Connection": "close"}
        send_headers.update(headers or {})
        conn.request(method, path, body=body, headers=send_headers)
        response = conn.getresponse()
        timings["first_byte_ms"] = round((time.monotonic() - started) * 1000, 1)
        data = b"" if method == "HEAD" else read_capped(response, max_bytes, deadline)
        merged = {}
        for name, value in response.getheaders():
            key = name.lower()
            merged[key] = f"{merged[key]}, {value}" if key in merged else value
        peer = conn.sock.getpeercert(binary_form=True) if scheme == "https" and conn.sock else None
        elapsed = round((time.monotonic() - started) * 1000, 1)
        timings["total_ms"] = elapsed
        address = conn.sock.getpeername()[0] if conn.sock else ""
        return FetchResult(response.status, response.reason, merged, data, elapsed, address, peer, timings)
    except OutboundError:
        raise
    except socket.timeout:
        raise OutboundError("timeout", f"no answer within {timeout:g} s") from None
    except (http.client.HTTPException, OSError) as exc:
        raise OutboundError("response", f"the server's answer could not be read: {exc}") from None
    finally:
        if conn is not None:
            conn.close()
