"""Name resolution for every outbound feature: the system resolver, or the one DNS server
the operator named (setting dns_resolver), so a split-horizon node gives one answer
everywhere (domain check and test, diagnose, probe, warm, buckets, ACME, notifications,
update check)."""

import random
import socket
import struct

DNS_TIMEOUT = 2.0
DNS_ATTEMPTS = 2
TYPE_A, TYPE_AAAA = 1, 28


class ResolveError(Exception):
    """The name could not be resolved; the message says how."""


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
            except TimeoutError:
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
    out: dict[str, list[str]] = {"A": [], "AAAA": []}
    for family, *_, sockaddr in infos:
        kind = "A" if family == socket.AF_INET else "AAAA"
        address = str(sockaddr[0])  # already the address text: only AF_INET and AF_INET6 answer a host name
        if address not in out[kind]:
            out[kind].append(address)
    return out
