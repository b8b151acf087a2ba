"""Who a request comes from: the peer, or the client a trusted proxy names; and the admin allow list.

The settings trusted_proxies and admin_allow hold CIDR lists (docs/API.md,
"Settings"). With trusted proxies, X-Forwarded-For is read from the nearest hop
outward and the first address that is not a trusted proxy is the client; a
hop that is not an address stops the walk at the peer. Each distinct list is
parsed once, not on every request.
"""

import ipaddress
import logging
from functools import lru_cache

log = logging.getLogger("contentnode")


class ClientAddresses:
    """The client-address policy of the stored settings of the moment (`settings()`)."""

    def __init__(self, settings):
        self._settings = settings
        # (a settings section, its trusted_proxies parsed): a write replaces the section, never changes it
        # in place (store.py), so the same section has the same list; one tuple, read and replaced whole
        self._trusted: tuple = (None, ())

    def _trusted_networks(self) -> tuple:
        settings = self._settings()
        seen = self._trusted
        if seen[0] is not settings:
            seen = self._trusted = (settings, networks(settings.get("trusted_proxies")))
        return seen[1]

    def client_ip(self, peer_ip: str, headers) -> str:
        """The peer address, or the X-Forwarded-For client when the peer is a trusted proxy
        (asked for every request: the list is looked up by its settings section, not parsed)."""
        seen = self._trusted
        trusted = seen[1] if seen[0] is self._settings() else self._trusted_networks()
        if not trusted:
            return peer_ip
        forwarded = [a.strip() for a in (headers.get("X-Forwarded-For") or "").split(",") if a.strip()]
        hops = [peer_ip] + forwarded[::-1]  # nearest first
        for hop in hops:
            try:
                address = ipaddress.ip_address(hop)
            except ValueError:
                return peer_ip
            if not any(address in net for net in trusted):
                return hop
        return hops[-1]

    def trusted_proxy(self, peer_ip: str) -> bool:
        """A peer in trusted_proxies: its connections carry many clients, so the public
        listeners do not cap them per address (http/parking.py). Without trusted proxies (the
        usual case) the address is not parsed: the listeners ask this under their lock."""
        trusted = self._trusted_networks()
        if not trusted:
            return False
        try:
            address = ipaddress.ip_address(peer_ip)
        except ValueError:
            return False
        return any(address in net for net in trusted)

    def admin_allowed(self, client_ip: str) -> bool:
        """Whether the admin allow list lets this client reach the admin host."""
        address = ipaddress.ip_address(client_ip)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped  # a dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d
        return any(address in net for net in networks(self._settings().get("admin_allow")))


def networks(cidrs) -> tuple:
    return _parse_networks(tuple(cidrs or ()))


@lru_cache(maxsize=32)
def _parse_networks(cidrs: tuple) -> tuple:
    """Parsed once per distinct list, not on every request."""
    result = []
    for cidr in cidrs:
        try:
            result.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            log.warning("ignoring invalid network %r", cidr)
    return tuple(result)
