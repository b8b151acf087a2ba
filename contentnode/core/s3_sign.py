"""AWS Signature Version 4 as S3 wants it: canonical request, signing key, Authorization.

Pure functions of their arguments (no clock, no network), so the AWS test
suite's examples check them directly; the client (core/s3.py) signs each call
and each presigned URL with them.
"""

import hashlib
import hmac
import re
from datetime import datetime, UTC
from urllib.parse import quote

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"


def uri_encode(value: str, keep_slash: bool = False) -> str:
    """RFC 3986 encoding as SigV4 wants it: unreserved kept, the rest %XX (upper case)."""
    return quote(value, safe="-._~/" if keep_slash else "-._~")


def canonical_query(params) -> str:
    """Sorted, encoded `k=v` pairs joined by '&' (params: iterable of (key, value))."""
    pairs = sorted((uri_encode(str(k)), uri_encode(str(v))) for k, v in params)
    return "&".join(f"{k}={v}" for k, v in pairs)


def _header_value(value: str) -> str:
    return re.sub(r"\s+", " ", str(value).strip())


def canonical_request(method: str, canonical_uri: str, query: str, headers: dict,
                      payload_hash: str) -> tuple[str, str]:
    """(canonical request, signed header list) for already encoded URI and query."""
    lowered: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower().strip()
        lowered[key] = f"{lowered[key]},{_header_value(value)}" if key in lowered else _header_value(value)
    names = sorted(lowered)
    signed = ";".join(names)
    head = "".join(f"{n}:{lowered[n]}\n" for n in names)
    return "\n".join([method, canonical_uri, query, head, signed, payload_hash]), signed


def signing_key(secret_key: str, datestamp: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret_key).encode()
    for part in (datestamp, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def authorization(method: str, canonical_uri: str, query: str, headers: dict, payload_hash: str,
                  access_key: str, secret_key: str, region: str, service: str, amz_date: str) -> str:
    """The Authorization header value; `headers` must already hold host and x-amz-date."""
    creq, signed = canonical_request(method, canonical_uri, query, headers, payload_hash)
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    sig = hmac.new(signing_key(secret_key, amz_date[:8], region, service), to_sign.encode(),
                   hashlib.sha256).hexdigest()
    return f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={sig}"


def amz_date(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y%m%dT%H%M%SZ")
