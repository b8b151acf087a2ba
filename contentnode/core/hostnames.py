"""Host names as the node stores them: one spelling per name.

Domains arrive from people (mixed case, Unicode, a trailing dot) and are later
compared with Host headers, SNI names and certificate SANs, which all use the
ASCII (punycode) lower-case form. Normalising once at the door keeps every
later comparison a plain string equality.
"""

import ipaddress
import re
import unicodedata
from functools import lru_cache

from contentnode.core.text import one_line

MAX_NAME = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class HostnameError(ValueError):
    """A name that cannot be a host name; the message says why."""


def _ascii_label(label: str) -> str:
    """The punycode of a label, refused when IDNA's mapping would change what it says.

    Python's codec is IDNA 2003: its nameprep silently drops some characters
    (a zero-width space), folds others (a full-width x to x) and maps ß to ss,
    which IDNA 2008 registries treat as another name. Only canonically equal
    spellings (NFC) pass, so the stored name is the one that was typed.
    """
    if label.isascii():
        return label
    try:
        encoded = label.encode("idna").decode("ascii")
        spoken = encoded.encode("ascii").decode("idna")
    except UnicodeError:
        raise HostnameError(f"label {label!r} is not a valid internationalised name") from None
    if spoken != unicodedata.normalize("NFC", label):
        raise HostnameError(f"label {ascii(label)} would be changed by IDNA mapping (to {spoken!r}); "
                            "send the name as it is meant") from None
    return encoded


def normalize_host(value) -> str:
    """The canonical form of a host name, or HostnameError.

    IDNA labels become punycode, letters lower case, surrounding spaces and one
    trailing dot are dropped; control characters and line separators anywhere,
    and labels IDNA would rewrite (see _ascii_label), are refused; single-label names (localhost) are accepted, IP literals are not
    (a domain is a name that certificates and DNS can speak about).
    """
    if not isinstance(value, str):
        raise HostnameError("host must be a string")
    if not one_line(value):  # before trimming, which would drop a separator silently
        raise HostnameError("host must not hold control characters or line separators")
    name = value.strip()
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise HostnameError("host must not be empty")
    if len(name) > 4 * MAX_NAME:
        raise HostnameError(f"host is longer than {MAX_NAME} characters")
    if is_ip_literal(name):
        raise HostnameError("host must be a DNS name, not an IP address")
    labels = [_ascii_label(label.lower()) for label in name.split(".")]
    for label in labels:
        if not label:
            raise HostnameError("host has an empty label (two dots in a row or a leading dot)")
        if len(label) > 63:
            raise HostnameError(f"label {label[:20]!r}... is longer than 63 characters")
        if not _LABEL.match(label):
            raise HostnameError(
                f"label {label!r} may only hold letters, digits and inner hyphens")
    name = ".".join(labels)
    if len(name) > MAX_NAME:
        raise HostnameError(f"host is longer than {MAX_NAME} characters")
    if labels[-1].isdigit():
        raise HostnameError("the last label of a host name cannot be all digits")
    return name


def url_netloc(host: str, port: int | None) -> str:
    """host[:port] of a URL the node stores (an S3 endpoint, an http bucket's url): an address in its
    canonical form, IPv6 in brackets, a name normalised; HostnameError for a bad name."""
    try:
        address = ipaddress.ip_address(host)
        host = f"[{address}]" if address.version == 6 else str(address)
    except ValueError:
        host = normalize_host(host)
    return host if port is None else f"{host}:{port}"


def is_ip_literal(value: str) -> bool:
    """True for an IPv4 or IPv6 address (brackets allowed)."""
    try:
        ipaddress.ip_address(value.strip("[]"))
        return True
    except ValueError:
        return False


@lru_cache(maxsize=4096)
def host_from_header(value: str | None) -> str | None:
    """The normalised host of a Host header (port dropped), or None when unusable.

    Cached: every public request asks it several times (ACME, upgrade, admin
    host, redirect and content hooks), and normalising costs more than serving
    a cache hit's headers.
    """
    if not value:
        return None
    value = value.strip()
    if value.startswith("["):
        return None
    name, _, port = value.rpartition(":") if ":" in value else (value, "", "")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 or port == ""):
        return None
    try:
        return normalize_host(name)
    except HostnameError:
        return None


def unicode_form(host: str) -> str:
    """The human (Unicode) spelling of a normalised host, for display."""
    try:
        return ".".join(
            label.encode("ascii").decode("idna") if label.startswith("xn--") else label
            for label in host.split("."))
    except UnicodeError:
        return host
