"""Does a name reach this node? And what does a visitor of it see?

The check resolves the name (A and AAAA), fetches the public verification page
through what DNS answered with a fresh random nonce, and compares the proof
with this node's own (HMAC under the node secret, constant-time compare): a
name that reaches another node answers a different proof and fails. Each step
is reported with its outcome and milliseconds so the panel can say exactly
where it broke. Names resolve through the system resolver, or through one DNS
server (host:port) when the operator names one.
"""

import json
import random
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

from contentnode.core.certs import summary_of_der
from contentnode.core import verify
from contentnode.core.netguard import OutboundError, default_tls_context, fetch

DNS_TIMEOUT = 2.0
DNS_ATTEMPTS = 2
TYPE_A, TYPE_AAAA = 1, 28
SHOWN_HEADERS = ("content-type", "content-length", "cache-control", "location", "server",
                 "strict-transport-security", "etag", "last-modified", "age")


class ResolveError(Exception):
    """The name could not be resolved; the message says how."""


@dataclass
class Steps:
    """The steps of a check, timed; `ok` once every step passed."""

    items: list = field(default_factory=list)

    def add(self, name, ok, detail, started):
        self.items.append({"name": name, "ok": ok, "detail": detail,
                           "ms": round((time.monotonic() - started) * 1000, 1)})
        return ok

    @property
    def ok(self):
        return bool(self.items) and all(step["ok"] for step in self.items)


def _encode_name(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode("ascii") for label in name.split(".")) + b"\0"


def _skip_name(packet: bytes, pos: int) -> int:
    for _ in range(128):
        length = packet[pos]
        if length == 0:
            return pos + 1
        if length & 0xC0 == 0xC0:
            return pos + 2
        pos += 1 + length
    raise ResolveError("malformed DNS answer")


def _parse_answer(packet: bytes, query_id: int, qtype: int) -> list:
    if len(packet) < 12:
        raise ResolveError("truncated DNS answer")
    answer_id, flags, qdcount, ancount = struct.unpack(">HHHH", packet[:8])
    if answer_id != query_id:
        raise ResolveError("DNS answer does not match the query")
    rcode = flags & 0xF
    if rcode == 3:
        return []
    if rcode != 0:
        raise ResolveError(f"DNS server answered with error code {rcode}")
    pos = 12
    for _ in range(qdcount):
        pos = _skip_name(packet, pos) + 4
    found = []
    for _ in range(ancount):
        pos = _skip_name(packet, pos)
        rtype, _, _, length = struct.unpack(">HHIH", packet[pos:pos + 10])
        data = packet[pos + 10:pos + 10 + length]
        pos += 10 + length
        if rtype == qtype and len(data) in (4, 16):
            found.append(socket.inet_ntop(socket.AF_INET if len(data) == 4 else socket.AF_INET6, data))
    return found


def query_dns(server: tuple, name: str, qtype: int) -> list:
    """Addresses of one record type from one DNS server over UDP (bounded retries)."""
    query_id = random.randrange(1 << 16)
    packet = struct.pack(">HHHHHH", query_id, 0x0100, 1, 0, 0, 0) + _encode_name(name) + struct.pack(">HH", qtype, 1)
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    for _ in range(DNS_ATTEMPTS):
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(DNS_TIMEOUT)
            try:
                sock.sendto(packet, server)
                return _parse_answer(sock.recv(4096), query_id, qtype)
            except socket.timeout:
                continue
            except (OSError, struct.error, IndexError) as exc:
                raise ResolveError(f"DNS query to {server[0]} port {server[1]} failed: {exc}") from None
    raise ResolveError(f"DNS server {server[0]} port {server[1]} did not answer")


def parse_server(text: str) -> tuple:
    """("ip", port) from "ip:port", "[v6]:port" or a bare address (port 53)."""
    text = text.strip()
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    return host, int(port or 53)


def resolve(host: str, dns_server: str | None = None) -> dict:
    """{"A": [...], "AAAA": [...]} for host, from dns_server or the system resolver."""
    if dns_server:
        server = parse_server(dns_server)
        return {"A": query_dns(server, host, TYPE_A), "AAAA": query_dns(server, host, TYPE_AAAA)}
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
            return {"A": [], "AAAA": []}
        raise ResolveError(f"resolver error: {exc.strerror or exc}") from None
    out = {"A": [], "AAAA": []}
    for family, *_, sockaddr in infos:
        kind = "A" if family == socket.AF_INET else "AAAA"
        if sockaddr[0] not in out[kind]:
            out[kind].append(sockaddr[0])
    return out


def _unverified_tls() -> ssl.SSLContext:
    # The proof, not the certificate, authenticates the node in a check.
    context = default_tls_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _bracket(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def check_domain(host: str, scheme: str, port: int, secret: bytes, policy,
                 dns_server: str | None = None, timeout: float = 10.0) -> Steps:
    """Run the domain check against this node's secret."""
    steps = Steps()
    started = time.monotonic()
    try:
        found = resolve(host, dns_server)
    except ResolveError as exc:
        steps.add("resolve", False, str(exc), started)
        return steps
    addresses = found["A"] + found["AAAA"]
    if not addresses:
        steps.add("resolve", False, f"{host} has no A or AAAA record: it does not resolve", started)
        return steps
    steps.add("resolve", True, f"A: {', '.join(found['A']) or 'none'}; AAAA: {', '.join(found['AAAA']) or 'none'}",
              started)

    started = time.monotonic()
    nonce = verify.new_nonce()
    target = host if scheme == "https" else _bracket(addresses[0])
    url = f"{scheme}://{target}:{port}{verify.CHECK_PATH}?nonce={nonce}"
    try:
        result = fetch(url, policy, headers={"Host": f"{host}:{port}"}, timeout=timeout, max_bytes=65536,
                       ssl_context=_unverified_tls() if scheme == "https" else None)
    except OutboundError as exc:
        steps.add("fetch", False, f"{scheme}://{host}:{port}{verify.CHECK_PATH}: {exc.message}", started)
        return steps
    if result.status != 200:
        steps.add("fetch", False, f"the verification page answered HTTP {result.status} from {result.address}", started)
        return steps
    steps.add("fetch", True, f"HTTP 200 from {result.address} port {port}", started)

    started = time.monotonic()
    steps.add("proof", *_judge_proof(result.body, nonce, secret), started)
    return steps


def _judge_proof(body: bytes, nonce: str, secret: bytes) -> tuple:
    try:
        page = json.loads(body)
        proof, echoed, node = page["proof"], page["nonce"], page.get("node")
    except (ValueError, KeyError, TypeError):
        return False, "the page is not a verification page of a contentnode"
    if not isinstance(proof, str) or echoed != nonce:
        return False, "the page did not answer for the nonce that was sent"
    if not verify.proof_matches(secret, nonce, proof):
        return False, f"the proof is not this node's: the name reaches another node ({node})"
    return True, "the proof matches this node"


def visit(url: str, host: str, policy, timeout: float = 10.0) -> dict:
    """Fetch url as a visitor would: status, chosen headers, timings, the certificate."""
    out = {"url": url, "ok": False}
    try:
        result = fetch(url, policy, timeout=timeout, max_bytes=8 << 20)
        trusted, trust_error = True, None
    except OutboundError as exc:
        if exc.step != "tls" or not url.startswith("https:"):
            out.update(error={"step": exc.step, "message": exc.message})
            return out
        trusted, trust_error = False, exc.message
        try:
            result = fetch(url, policy, timeout=timeout, max_bytes=8 << 20, ssl_context=_unverified_tls())
        except OutboundError as again:
            out.update(error={"step": again.step, "message": again.message})
            return out
    out.update(ok=result.status < 400, status=result.status, address=result.address,
               headers={k: v for k, v in result.headers.items() if k in SHOWN_HEADERS},
               size=len(result.body), timings=result.timings)
    if result.peer_cert:
        certificate = summary_of_der(result.peer_cert, host)
        certificate["trusted"] = trusted
        if trust_error:
            certificate["trust_error"] = trust_error
        out["certificate"] = certificate
    return out
