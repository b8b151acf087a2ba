"""The records an S3 call takes and gives: where a bucket lives, what an object
or a listing page holds, and how an answer's headers and XML become them.

Plain data and parsing, no connection: core/s3.py (the client) builds them.
"""

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from contentnode.core.s3_errors import S3Error
from contentnode.core.s3_sign import uri_encode
from contentnode.core.text import whole_number

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element


@dataclass(frozen=True)
class BucketConfig:
    """Where a bucket lives and how to sign for it. repr hides the secret."""

    endpoint: str  # http(s)://host[:port], no path
    region: str
    bucket: str
    access_key: str
    secret_key: str
    path_style: bool = False

    def __repr__(self):
        return f"BucketConfig({self.endpoint!r}, bucket={self.bucket!r}, region={self.region!r})"

    @classmethod
    def from_record(cls, record: dict) -> "BucketConfig":
        return cls(record["endpoint"], record["region"], record["bucket"], record["access_key"],
                   record["secret_key"], bool(record.get("path_style", False)))

    def target(self, key: str | None) -> tuple[str, str, int, str, str]:
        """(scheme, host, port, Host header, canonical path) for a key, or the bucket when None."""
        parts = urlsplit(self.endpoint)
        scheme, host = parts.scheme, parts.hostname
        if not host:  # core.buckets accepts no endpoint without a host; a hand-edited state file might hold one
            raise S3Error("url", "the bucket's endpoint has no host")
        port = parts.port or (443 if scheme == "https" else 80)
        path = "/" + uri_encode(key, keep_slash=True) if key is not None else "/"
        if self.path_style:
            path = "/" + uri_encode(self.bucket) + (path if key is not None else "")
        else:
            host = f"{self.bucket}.{host}"
        default = (scheme == "https" and port == 443) or (scheme == "http" and port == 80)
        host_header = host if default else f"{host}:{port}"
        if ":" in host and not host.startswith("["):
            host_header = f"[{host}]" if default else f"[{host}]:{port}"
        return scheme, host, port, host_header, path


@dataclass
class ObjectInfo:
    status: int
    size: int | None  # the whole object's size (from Content-Range when ranged)
    content_type: str | None
    etag: str | None
    last_modified: str | None
    headers: dict


@dataclass(frozen=True)
class Fetched:
    """What a conditional GET found: the body and ETag, or (body None) "not modified"."""

    body: bytes | None
    etag: str | None

    @property
    def not_modified(self) -> bool:
        return self.body is None


@dataclass
class ListPage:
    keys: list  # [{"key","size","etag","last_modified"}]
    truncated: bool
    next_token: str | None


def response_headers(response) -> dict:
    merged: dict[str, str] = {}
    for name, value in response.getheaders():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged


def object_info(status: int, headers: dict) -> ObjectInfo:
    size = None
    match = re.match(r"bytes \d+-\d+/(\d+)", headers.get("content-range", ""))
    if match:
        size = whole_number(match.group(1))
    else:
        size = whole_number(headers.get("content-length", ""))
    return ObjectInfo(status, size, headers.get("content-type"), headers.get("etag"),
                      headers.get("last-modified"), headers)


def _strip_ns(root: "Element") -> None:
    for element in root.iter():
        if "}" in element.tag:
            element.tag = element.tag.split("}", 1)[1]


def parse_list(body: bytes) -> ListPage:
    """Parse a ListObjectsV2 answer (namespace or not); ElementTree is imported by the first listing."""
    import xml.etree.ElementTree as ET
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise S3Error("protocol", f"the listing is not valid XML: {exc}") from None
    _strip_ns(root)
    keys = []
    for item in root.findall("Contents"):
        size = item.findtext("Size") or "0"
        keys.append({"key": item.findtext("Key"), "size": whole_number(size),
                     "etag": item.findtext("ETag"), "last_modified": item.findtext("LastModified")})
    truncated = (root.findtext("IsTruncated") or "false").lower() == "true"
    return ListPage(keys, truncated, root.findtext("NextContinuationToken"))
