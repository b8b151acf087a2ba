"""What a failed S3 call means for the operator: one S3Error per cause.

The server's own error codes (and the transport's failures: resolve, connect,
TLS, timeout, protocol) become one of our `code`s an operator can act on,
with the S3 code kept beside it. Split from core/s3.py (the client) so the
many callers that only catch the error need not know the client.
"""

import http.client
import socket
import ssl

from contentnode.core import netguard
from contentnode.core.origin import OriginError

# S3 error codes -> (our cause code, what it means for the operator).
_CAUSES = {
    "InvalidAccessKeyId": ("credentials_refused", "the access key is not known to the server"),
    "SignatureDoesNotMatch": ("credentials_refused", "the secret key does not match the access key"),
    "InvalidToken": ("credentials_refused", "the credentials were refused"),
    "ExpiredToken": ("credentials_refused", "the credentials have expired"),
    "AccessDenied": ("access_denied", "the credentials are not allowed to do this"),
    "AllAccessDisabled": ("access_denied", "all access to this bucket is disabled"),
    "NoSuchBucket": ("no_such_bucket", "the bucket does not exist"),
    "NoSuchKey": ("no_such_key", "no object has this key"),
    "RequestTimeTooSkewed": ("clock_skew", "the node's clock differs too much from the server's"),
    "AuthorizationHeaderMalformed": ("wrong_region", "the server expects another region"),
    "PermanentRedirect": ("wrong_region", "the bucket lives at another endpoint or region"),
    "InvalidRange": ("invalid_range", "the requested byte range is not satisfiable"),
    "PreconditionFailed": ("precondition_failed", "the object changed since it was last read"),
    "ConditionalRequestConflict": ("precondition_failed", "another write to the object is in progress"),
}


class S3Error(OriginError):
    """A failed S3 call. `code` is one of ours (see _CAUSES and the transport
    codes resolve, address, connect, tls, timeout, protocol, too_large, url),
    `status` the HTTP status when the server answered, `s3_code` its own code."""

    def __init__(self, code: str, message: str, status: int | None = None, s3_code: str | None = None):
        super().__init__(code, message, status)
        self.s3_code = s3_code

    def as_dict(self) -> dict:
        out = super().as_dict()
        if self.s3_code:
            out["s3_code"] = self.s3_code
        return out


INTERNAL_HINT = (" (the storage server failed inside and logged why; a common cause is no writable volume "
                 "left, as SeaweedFS answers when each bucket's volumes used up its -volume.max)")


def error_from_response(status: int, headers: dict, body: bytes, what: str) -> S3Error:
    """Turn an S3 error answer (XML body or, for HEAD, none) into an S3Error. ElementTree is imported
    by the first S3 answer that needs it, not by every start (most starts read no S3 answer)."""
    import xml.etree.ElementTree as ET
    s3_code, detail = None, ""
    try:
        root = ET.fromstring(body) if body else None
    except ET.ParseError:
        root = None
    if root is not None:
        s3_code = root.findtext("Code")
        detail = root.findtext("Message") or ""
    if s3_code is None:
        s3_code = {404: "NoSuchKey" if what == "object" else "NoSuchBucket",
                   301: "PermanentRedirect"}.get(status)
    if s3_code in _CAUSES:
        code, meaning = _CAUSES[s3_code]
    elif status == 403:
        code, meaning = "access_denied", "the server refused the credentials or the access (HEAD answers carry no detail)"
    else:
        code, meaning = "s3_error", f"the server answered {status}"
    region = headers.get("x-amz-bucket-region")
    if region:
        meaning += f" (the bucket's region is {region})"
    message = f"{meaning}: {s3_code} {detail}".strip() if s3_code else meaning
    if s3_code == "InternalError":  # the answer never says why; the likeliest cause on a small server
        message += INTERNAL_HINT
    return S3Error(code, message, status, s3_code)


def transport_error(exc: BaseException, timeout: float) -> S3Error:
    if isinstance(exc, netguard.OutboundError):
        return S3Error(exc.step if exc.step != "dns" else "resolve", exc.message)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return S3Error("timeout", f"no answer within {timeout:g} s")
    if isinstance(exc, ssl.SSLError):
        return S3Error("tls", f"TLS failure: {exc}")
    if isinstance(exc, http.client.HTTPException):
        return S3Error("protocol", f"the server's answer is not valid HTTP: {exc!r}")
    return S3Error("connect", f"connection failed: {exc}")
