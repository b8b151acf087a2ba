"""The fields of a request the node passes on to an http origin, and of the answer it passes back.

A proxy drops the hop-by-hop fields (Connection and every field it names,
Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*: RFC 9110
§7.6.1), says who asked (X-Forwarded-For, -Proto, -Host) and adds itself to
Via (RFC 9110 §7.6.3). X-Forwarded-For keeps what a trusted proxy in front
of the node sent, with the peer's address appended; from anyone else it is
replaced, so a client cannot make the origin believe another address.
"""

from collections.abc import Iterable

from contentnode.core.http_cache import HOP_BY_HOP

VIA = "1.1 contentnode"
# what the origin client frames or sets itself, and what the node writes here
_REPLACED = frozenset({"host", "content-length", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "via"})


def _connection_names(pairs: list[tuple[str, str]]) -> set[str]:
    return {name.strip().lower() for key, value in pairs if key.lower() == "connection"
            for name in value.split(",") if name.strip()}


def end_to_end(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The fields without the hop-by-hop ones and those Connection names."""
    pairs = list(pairs)
    drop = HOP_BY_HOP | _connection_names(pairs)
    return [(key, value) for key, value in pairs if key.lower() not in drop]


def _joined(pairs: list[tuple[str, str]], name: str) -> str | None:
    values = [value for key, value in pairs if key.lower() == name]
    return ", ".join(values) if values else None


def request_fields(pairs: Iterable[tuple[str, str]], peer_ip: str, peer_trusted: bool, proto: str,
                   host: str, drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The client's fields as the origin gets them (`drop`: lower-case names left out as well)."""
    pairs = end_to_end(pairs)
    out = [(key, value) for key, value in pairs if key.lower() not in _REPLACED and key.lower() not in set(drop)]
    chain = _joined(pairs, "x-forwarded-for") if peer_trusted else None
    out.append(("X-Forwarded-For", f"{chain}, {peer_ip}" if chain else peer_ip))
    out.append(("X-Forwarded-Proto", (_joined(pairs, "x-forwarded-proto") if peer_trusted else None) or proto))
    out.append(("X-Forwarded-Host", (_joined(pairs, "x-forwarded-host") if peer_trusted else None) or host))
    via = _joined(pairs, "via")
    out.append(("Via", f"{via}, {VIA}" if via else VIA))
    return out


def response_fields(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The origin's answer fields as the client gets them: end to end, without the length (the
    node frames the body itself) or the origin's Server (the node's write path sends its own, as
    nginx hides an upstream's), the node added to Via."""
    pairs = end_to_end(pairs)
    via = _joined(pairs, "via")
    out = [(key, value) for key, value in pairs if key.lower() not in ("content-length", "via", "server")]
    return out + [("Via", f"{via}, {VIA}" if via else VIA)]
