"""The update check: fetch a small signed manifest, verify its Ed25519
signature, compare versions. It never downloads or installs anything: an
operator upgrades with the system's package tools.

A manifest is JSON {"payload": base64(JSON), "signature": base64(64 bytes)}
where the signature covers the payload bytes exactly as sent (no JSON
canonicalisation to get wrong). The payload is
{"product": "contentnode", "issued_at": RFC 3339,
 "channels": {"stable": {"version": "1.2.0", "notes": "..."}, "beta": {...}}}.
"""

import base64
import binascii
import re
from importlib import resources

from contentnode.core import netguard
from contentnode.core.text import json_loads

MAX_MANIFEST_BYTES = 64 * 1024
MAX_NOTES = 4000
_VERSION = re.compile(r"^v?(\d{1,9})\.(\d{1,9})\.(\d{1,9})(?:-([0-9A-Za-z.-]{1,64}))?(?:\+[0-9A-Za-z.-]{1,64})?$")


class UpdateError(Exception):
    """The check failed; the message says why, for the operator."""


def parse_version(text):
    """A sortable key for a semantic version; a pre-release sorts before its release."""
    match = _VERSION.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{text!r} is not a version such as 1.2.3")
    major, minor, patch, pre = match.groups()
    if pre is None:
        tail = (1,)
    else:
        tail = (0,) + tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (int(major), int(minor), int(patch)) + (tail,)


def load_public_key(text):
    """An Ed25519 public key: PEM, or base64 of the raw 32 bytes or of the DER form."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    text = text.strip()
    try:
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(text.encode())
        else:
            raw = base64.b64decode(text, validate=True)
            key = (Ed25519PublicKey.from_public_bytes(raw) if len(raw) == 32
                   else serialization.load_der_public_key(raw))
    except (ValueError, binascii.Error, TypeError):
        raise ValueError("not an Ed25519 public key (PEM, or base64 of the raw or DER key)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("the update key must be an Ed25519 key")
    return key


def shipped_public_key():
    """The release signing key that ships inside the package."""
    return load_public_key(resources.files("contentnode").joinpath("update_key.pub").read_text())


def verify_manifest(raw, public_key):
    """The manifest's payload after checking the signature; UpdateError otherwise."""
    from cryptography.exceptions import InvalidSignature
    try:
        envelope = json_loads(raw)
    except ValueError:
        raise UpdateError("the manifest is not JSON") from None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("payload"), str):
        raise UpdateError("the manifest has no payload")
    if not isinstance(envelope.get("signature"), str) or not envelope["signature"]:
        raise UpdateError("the manifest is not signed")
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        signature = base64.b64decode(envelope["signature"], validate=True)
    except binascii.Error:
        raise UpdateError("the manifest's payload or signature is not base64") from None
    try:
        public_key.verify(signature, payload)
    except InvalidSignature:
        raise UpdateError("the manifest's signature does not match the update key") from None
    try:
        document = json_loads(payload)
    except ValueError:
        raise UpdateError("the signed payload is not JSON") from None
    if not isinstance(document, dict) or document.get("product") != "contentnode":
        raise UpdateError("the manifest is not for contentnode")
    if not isinstance(document.get("channels"), dict):
        raise UpdateError("the manifest lists no channels")
    return document


def compare(document, channel, current):
    """The check's answer for one channel of a verified manifest."""
    entry = document["channels"].get(channel)
    if not isinstance(entry, dict):
        raise UpdateError(f"the manifest has no {channel!r} channel")
    latest = entry.get("version")
    try:
        newer = parse_version(latest) > parse_version(current)
    except ValueError as exc:
        raise UpdateError(f"bad version in the manifest: {exc}") from None
    notes = entry.get("notes") if isinstance(entry.get("notes"), str) else ""
    return {"current": current, "latest": latest, "available": newer,
            "notes": notes[:MAX_NOTES], "channel": channel}


def check(url, channel, current, public_key, policy, timeout=15.0, ssl_context=None):
    """Fetch, verify and compare; raises UpdateError with the reason."""
    try:
        result = netguard.fetch(url, policy, timeout=timeout, max_bytes=MAX_MANIFEST_BYTES,
                                headers={"Accept": "application/json"}, ssl_context=ssl_context)
    except netguard.OutboundError as exc:
        raise UpdateError(f"cannot fetch the manifest ({exc.step}): {exc.message}") from None
    if result.status != 200:
        where = f" to {result.headers.get('location')}" if 300 <= result.status < 400 else ""
        raise UpdateError(f"the update server answered HTTP {result.status}{where}")
    return compare(verify_manifest(result.body, public_key), channel, current)
