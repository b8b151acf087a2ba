"""A small country MMDB file, written for a test in the GeoLite2-Country layout (an IPv6 tree with
IPv4 in ::/96, {"country": {"iso_code"}} records) with the test-only mmdb-writer package."""

from mmdb_writer import MMDBWriter
from netaddr import IPSet

# loopback addresses a test client can send from, each in a country
COUNTRIES = {"127.0.0.2/32": "DE", "127.0.0.3/32": "FR", "127.0.0.4/32": "US", "2001:db8::/48": "NL"}


def write_country_db(path, networks=None) -> str:
    """`networks` {CIDR: country code} (default COUNTRIES) as a country MMDB file at path."""
    writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="GeoLite2-Country",
                        languages=["en"], description="contentnode test countries")
    for cidr, code in (networks or COUNTRIES).items():
        writer.insert_network(IPSet([cidr]), {"country": {"iso_code": code, "names": {"en": code}}})
    writer.to_db_file(str(path))
    return str(path)
