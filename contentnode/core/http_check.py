"""The step-by-step check of an http bucket: resolve, connect, TLS, a request.

Each step says what it saw, so an operator finds the mistake at the first
failing one: the addresses the name resolves to (and which the outbound guard
refuses), the address connected to, the TLS version with the certificate's
names and expiry (also when it is not trusted, with why), then what the
origin answers a HEAD of the url's path (a GET when HEAD is refused). Fresh
connections, never the pool's: the check shows the whole way every time.
"""

import http.client
import socket
import ssl
import time

from contentnode.core import certs, netguard
from contentnode.core.http_pool import tls_context, transport_error
from contentnode.core.steps import Steps


def _fail(steps: Steps, name: str, exc: BaseException, started: float) -> dict:
    error = transport_error(exc)
    steps.add(name, False, error.message, started, code=error.code)
    return steps.report()


def _certificate_text(der: bytes | None, host: str, now: float) -> str:
    if not der:
        return "the origin presented no certificate"
    info = certs.summary_of_der(der, host)
    if "error" in info:
        return info["error"]
    days = int((certs.load_der(der).not_valid_after_utc.timestamp() - now) // 86400)
    names = ", ".join(info["sans"]) or "no DNS names"
    expiry = f"expired {-days} days ago" if days < 0 else f"expires {info['not_after']} (in {days} days)"
    match = "" if info["matches_host"] else f"; it does not name {host}"
    return f"certificate for {names}, issued by {info['issuer']}, {expiry}{match}"


def _untrusted_detail(sock_factory, host: str, reason: str, now: float) -> str:
    """Why verification failed, with what the unverified certificate says."""
    try:
        with tls_context(False).wrap_socket(sock_factory(), server_hostname=host) as tls:
            seen = _certificate_text(tls.getpeercert(binary_form=True), host, now)
    except (OSError, ssl.SSLError, netguard.OutboundError):
        seen = "the certificate could not be read"
    return f"certificate not trusted: {reason}; {seen} (tls_verify false accepts it)"


def _tls(steps: Steps, config, policy, sock: socket.socket, now: float):
    """The TLS step; the wrapped socket, or None when it failed (the report is complete then)."""
    started = time.monotonic()
    sock.settimeout(config.connect_timeout)
    try:
        tls = tls_context(config.tls_verify).wrap_socket(sock, server_hostname=config.host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        again = lambda: netguard.connect_vetted(config.host, config.port, policy, config.connect_timeout)  # noqa: E731
        steps.add("tls", False, _untrusted_detail(again, config.host, exc.verify_message, now), started,
                  code="tls")
        return None
    except (OSError, ssl.SSLError) as exc:
        sock.close()
        _fail(steps, "tls", exc, started)
        return None
    verified = "verified" if config.tls_verify else "NOT verified (tls_verify false)"
    text = _certificate_text(tls.getpeercert(binary_form=True), config.host, now)
    steps.add("tls", True, f"{tls.version()}, {text}, {verified}", started)
    return tls


def _request(conn: http.client.HTTPConnection, method: str, target: str, host: str) -> http.client.HTTPResponse:
    conn.request(method, target, headers={"Host": host, "User-Agent": "contentnode"})
    answer = conn.getresponse()
    answer.read(65536)   # (a HEAD's empty body too: the connection takes the next request only then)
    return answer


def check_origin(config, policy: netguard.OutboundPolicy, now: float | None = None) -> dict:
    """resolve, connect, tls (https), request: stop at the first failing step."""
    now = time.time() if now is None else now
    steps = Steps()
    started = time.monotonic()
    try:
        addresses = netguard.vet_address(config.host, config.port, policy)
    except netguard.OutboundError as exc:
        return _fail(steps, "resolve", exc, started)
    steps.add("resolve", True, f"{config.host} resolves to {', '.join(addresses)}", started)
    started = time.monotonic()
    try:
        sock = netguard.connect_vetted(config.host, config.port, policy, config.connect_timeout)
    except netguard.OutboundError as exc:
        return _fail(steps, "connect", exc, started)
    peer = sock.getpeername()
    steps.add("connect", True, f"connected to {peer[0]} port {peer[1]}", started)
    if config.scheme == "https":
        sock = _tls(steps, config, policy, sock, now)
        if sock is None:
            return steps.report()
    started = time.monotonic()
    sock.settimeout(config.read_timeout)
    conn = http.client.HTTPConnection(config.host, config.port, timeout=config.read_timeout)
    conn.sock = sock
    target = config.target("")
    try:
        answer = _request(conn, "HEAD", target, config.host_for(None))
        method = "HEAD"
        if answer.status in (405, 501):
            answer = _request(conn, "GET", target, config.host_for(None))
            method = "GET"
    except (OSError, http.client.HTTPException) as exc:
        return _fail(steps, "request", exc, started)
    finally:
        conn.close()
    ok = answer.status < 500
    detail = f"{method} {target} answered {answer.status} {answer.reason}".rstrip()
    server = answer.getheader("Server")
    steps.add("request", ok, detail + (f" (Server: {server[:80]})" if server else "") +
              ("" if ok else ": the origin fails"), started, status=answer.status,
              **({} if ok else {"code": "status"}))
    return steps.report()

