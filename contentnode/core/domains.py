"""The rules a domain record keeps, for the API and backup restore alike.

A domain's status is pending until a check proves the name reaches this node
(verified) or fails. A redirect sends every request for the host elsewhere;
it may not point at the host itself, and its target carries a query only
when the request path is not appended to it.
"""

from urllib.parse import urlsplit

from contentnode.core import fields as v
from contentnode.core import settings
from contentnode.core.fields import FieldError

STATUSES = ("pending", "verified", "failed")
REDIRECT_CODES = (301, 302, 307, 308)


def redirect_rule(body: dict, host: str) -> dict | None:
    """The redirect of `host` that body asks for ({"to", "code", "keep_path"}); None clears it."""
    to = body.get("to", ...)
    if to is ...:
        raise FieldError("to is required (null clears the redirect)", "to")
    if to is not None:
        to = settings.http_url("to", to)
    code = v.choice(body, "code", REDIRECT_CODES, default=301)
    keep_path = v.boolean(body, "keep_path", default=True)
    if to is None:
        return None
    if (urlsplit(to).hostname or "").rstrip(".").lower() == host:
        raise FieldError("a domain cannot redirect to itself", "to")
    if ("?" in to or "#" in to) and keep_path:
        raise FieldError("to may only carry a query when keep_path is false", "to")
    return {"to": to, "code": code, "keep_path": keep_path}
