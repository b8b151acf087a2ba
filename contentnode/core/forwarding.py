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
# what an answer loses on its way to the client (the node frames the body and writes Via and Server)
_ANSWER_DROPPED = frozenset({"content-length", "via", "server"})


def _named(pairs: Iterable[tuple[str, str]], dropped_first: frozenset = frozenset()) -> list[tuple[str, str, str]]:
    """(lower-case name, name, value) of the end-to-end fields, each name lower-cased once: without
    `dropped_first` (lower-case names), then without the hop-by-hop fields and those a remaining
    Connection field names."""
    named = [(key.lower(), key, value) for key, value in pairs]
    drop = HOP_BY_HOP | dropped_first
    for name, _key, value in named:
        if name == "connection" and name not in dropped_first:
            drop = drop | {part.strip().lower() for part in value.split(",") if part.strip()}
    return [item for item in named if item[0] not in drop]


def end_to_end(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The fields without the hop-by-hop ones and those Connection names."""
    return [(key, value) for _name, key, value in _named(pairs)]


def _joined(named: list[tuple[str, str, str]], name: str) -> str | None:
    values = [value for lower, _key, value in named if lower == name]
    return ", ".join(values) if values else None


def request_fields(pairs: Iterable[tuple[str, str]], peer_ip: str, peer_trusted: bool, proto: str,
                   host: str, drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The client's fields as the origin gets them (`drop`: lower-case names left out as well)."""
    named = _named(pairs)
    left_out = _REPLACED.union(drop)
    out = [(key, value) for name, key, value in named if name not in left_out]
    chain = _joined(named, "x-forwarded-for") if peer_trusted else None
    out.append(("X-Forwarded-For", f"{chain}, {peer_ip}" if chain else peer_ip))
    out.append(("X-Forwarded-Proto", (_joined(named, "x-forwarded-proto") if peer_trusted else None) or proto))
    out.append(("X-Forwarded-Host", (_joined(named, "x-forwarded-host") if peer_trusted else None) or host))
    via = _joined(named, "via")
    out.append(("Via", f"{via}, {VIA}" if via else VIA))
    return out


def response_fields(pairs: Iterable[tuple[str, str]], not_sent: frozenset = frozenset()) -> list[tuple[str, str]]:
    """The origin's answer fields as the client gets them: without `not_sent` (lower-case names,
    left out before Connection is read), end to end, without the length (the node frames the
    body itself) or the origin's Server (the node's write path sends its own, as nginx hides an
    upstream's), the node added to Via."""
    named = _named(pairs, not_sent)
    via = _joined(named, "via")
    out = [(key, value) for name, key, value in named if name not in _ANSWER_DROPPED]
    return out + [("Via", f"{via}, {VIA}" if via else VIA)]
