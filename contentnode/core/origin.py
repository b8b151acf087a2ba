"""What the content path, the bucket API and traffic diagnosis ask of an origin.

A bucket is an origin of one of two kinds: an S3-compatible bucket (core/s3_origin.py
S3Origin) or a folder on the node (core/folders.py FolderOrigin);
core/buckets.py origin_for picks one from the record. Callers see only the
four calls below and OriginError, so neither the cache nor the handlers
branch on the kind.
"""

from typing import Protocol

from contentnode.core.cache_fill import OriginAnswer


class OriginError(Exception):
    """A failed origin call. `code` names the cause an operator can act on, `status` the
    status the origin answered (an HTTP status for S3; 403/404 for a folder) when there is one."""

    def __init__(self, code: str, message: str, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def as_dict(self) -> dict:
        out: dict[str, str | int] = {"code": self.code, "message": self.message}
        if self.status is not None:
            out["status"] = self.status
        return out


class Origin(Protocol):
    def open(self, key: str, client_host: str | None = None) -> OriginAnswer:
        """The object for the cache: status 200 with its body, or 404 (no such object) or
        403 (the origin may not read it) without one; OriginError for anything else.
        `client_host`: the host the visitor asked for, which an http origin may send as its Host
        (host_header "client"); origins without a Host of their own ignore it."""

    def head(self, key: str, client_host: str | None = None) -> dict:
        """{"status","size","content_type","etag","last_modified"} of one object, or OriginError."""

    def check(self) -> dict:
        """{"ok","steps"}: the steps an operator follows to find a mistake, stopping at the first failure."""

    def probe(self, key: str) -> dict:
        """{"ok","status","size","content_type","etag","last_modified","first_bytes","ms"}, or on
        failure {"ok": false,"status","error","ms"}: what POST /api/buckets/test answers."""
