"""The node's country database: which country an address is in, for `access.countries`.

The operator provides a country MMDB file (GeoLite2-Country, DB-IP lite country) and names it
with the start-up value `geoip_db`; it is read with the optional `maxminddb` package (the
`geoip` extra). Each process (the daemon and every public worker) opens it once in the
composition root (app.py) and hands this object down: to the rule checks at save (a country
list needs a database), to the edge guard on the public port, and through `country_of` to
whoever else wants an address's country (traffic counting by country).
"""

import importlib
import importlib.util
import ipaddress
from collections.abc import Callable
from functools import lru_cache

from contentnode.config import ConfigError

LOOKUPS_REMEMBERED = 4096   # addresses whose country each process keeps (a lookup is a tree walk)
_NOWHERE: dict = {}   # no database: no address is placed


class Countries:
    """The country of an address, or None when the database does not know it or there is none.

    `country_of(address)`: the ISO 3166-1 alpha-2 code (upper case) of a client address, or None: no
    database, not an address, or an address the database does not place (private, reserved,
    unlisted). Traffic counting asks it for every public request, so it is chosen once: the
    remembered lookup, or without a database an empty dict's get (no Python call per request).
    """

    def __init__(self, reader=None, missing: str | None = None):
        self._reader = reader
        self.missing = missing   # what the node lacks for country lists (None: it has a database)
        self.country_of: Callable[[str], str | None] = (
            lru_cache(maxsize=LOOKUPS_REMEMBERED)(self._find) if reader is not None else _NOWHERE.get)

    @property
    def available(self) -> bool:
        return self._reader is not None

    def _find(self, address: str) -> str | None:
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return None
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped:
            parsed = parsed.ipv4_mapped
        try:
            record = self._reader.get(parsed)
        except ValueError:   # an IPv6 address in an IPv4-only database
            return None
        if not isinstance(record, dict):
            return None
        for place in ("country", "registered_country"):   # anycast and satellite ranges carry only the latter
            found = record.get(place)
            code = found.get("iso_code") if isinstance(found, dict) else None
            if isinstance(code, str) and len(code) == 2:
                return code.upper()
        return None


def open_countries(path: str) -> Countries:
    """The database named by `geoip_db` ("" : none), opened once; a named file that cannot be read as
    an MMDB file stops the start (ConfigError: the operator asked for one, so running without it
    would silently refuse or pass every country list)."""
    if not path:   # the package is looked for, not imported: importing it is CPU every start would pay for nothing
        installed = importlib.util.find_spec("maxminddb") is not None
        return Countries(missing="the geoip_db start-up value" + ("" if installed else " and the maxminddb package"))
    try:
        maxminddb = importlib.import_module("maxminddb")
    except ImportError:   # the optional extra is not installed: country lists are refused at save
        maxminddb = None
    if maxminddb is None:
        return Countries(missing=f"the maxminddb package to read geoip_db {path}")
    try:
        reader = maxminddb.open_database(path, maxminddb.MODE_AUTO)   # the C reader when built, memory-mapped
    except (OSError, ValueError, maxminddb.InvalidDatabaseError) as exc:
        raise ConfigError(f"config: geoip_db {path} cannot be read as a country MMDB file: {exc}") from None
    return Countries(reader)
