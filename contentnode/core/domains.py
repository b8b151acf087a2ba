"""The rules a domain record keeps, for the API and backup restore alike.

A domain's status is pending until a check proves the name reaches this node
(verified) or fails. A redirect sends every request for the host elsewhere;
it may not point at the host itself, and its target carries a query only
when the request path is not appended to it.
"""

import re
from urllib.parse import urlsplit

from contentnode.clock import parse_rfc3339
from contentnode.core import fields as v
from contentnode.core import edge_rules, rules, settings
from contentnode.core.fields import TIME_MAX, TIME_MIN, FieldError
from contentnode.core.records import Field, Record
from contentnode.core.shapes import BOOLEAN, nullable, obj, one_of, text

STATUSES = ("pending", "verified", "failed")
REDIRECT_CODES = (301, 302, 307, 308)
MAX_HOST = 253
ANY_OBJECT = {"type": ["object", "null"]}
MAX_ERROR_PAGES = 20
EDGE_MEMBERS = ("access", "error_pages")   # set with PUT /api/domains/{host}
_STATUS_KEY = re.compile(r"[45](?:[0-9]{2}|xx)")
ERROR_PAGES_SHAPE = nullable({"type": "object", "additionalProperties": text(rules.MAX_PREFIX),
                              "description": '{"404": "<bucket key>", "5xx": "<bucket key>", ...}: the page sent '
                                             "with an error answer of that status (or class)"})


def error_pages_rule(value):
    """The stored form of `error_pages`: null, or {status or class: bucket key} with both checked."""
    if value is None:
        return None
    if len(value) > MAX_ERROR_PAGES:
        raise FieldError(f"error_pages holds at most {MAX_ERROR_PAGES} entries", "error_pages")
    for status, key in value.items():
        field = f"error_pages.{status[:20]}"
        if not _STATUS_KEY.fullmatch(status):
            raise FieldError(f'{field}: {status[:20]!r} is neither an error status from 400 to 599 ("404") nor '
                             'a class ("4xx", "5xx")', field)
        try:
            rules.validate_prefix(key)
        except FieldError as exc:
            raise FieldError(f"{field}: {exc.message.replace('prefix', 'the key')}", field) from None
        if not key or key.endswith("/") or key.rsplit("/", 1)[-1] in (".", ".."):
            raise FieldError(f"{field}: the key must name an object (not empty, not a folder, no dot segment)",
                             field)
    return dict(value)


def error_page(pages: dict | None, status: int) -> str | None:
    """The key of the page for an error answer of `status`: its own entry, else its class's."""
    if not pages:
        return None
    return pages.get(str(status)) or pages.get(f"{status // 100}xx")


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


def _certificate(summary):
    """The certificate summary a domain record keeps (core/certs.py): null, or one naming its not_after."""
    if summary is not None:
        try:
            valid = TIME_MIN <= parse_rfc3339(summary.get("not_after")) <= TIME_MAX
        except (TypeError, ValueError, OverflowError):
            valid = False
        if not valid:
            raise FieldError("certificate not_after must be an RFC 3339 time between 2000 and 9999", "certificate")
    return summary


def _redirect_fits(record) -> None:
    """A stored redirect keeps the rules redirect_rule applies to a new one."""
    if record["redirect"] is not None:
        try:
            redirect_rule(record["redirect"], record["host"])
        except FieldError as exc:
            raise FieldError(f"redirect {exc.message}", "redirect") from None


# A domain's record, keyed by its host. Only the host comes from a create body (POST /api/domains); the
# redirect comes from POST /api/domains/redirect, access and error_pages from PUT /api/domains/{host},
# and the node writes the rest: the check's outcome, the certificate.
DOMAIN = Record("domain", {
    "host": Field(text(MAX_HOST), rule=lambda value: v.host({"host": value})),
    "status": Field(one_of(*STATUSES), "pending", editable=False),
    "last_check": Field(ANY_OBJECT, None, editable=False),
    "redirect": Field(nullable(obj({"to": text(2048), "code": one_of(*REDIRECT_CODES), "keep_path": BOOLEAN},
                                   required=["to", "code", "keep_path"])), None, editable=False),
    "certificate": Field(ANY_OBJECT, None, rule=_certificate, editable=False),
    # changed with PUT /api/domains/{host}: who may fetch the domain's content, and its error pages
    "access": Field(edge_rules.ACCESS_SHAPE, None, rule=edge_rules.access_rule, editable=False, since=5),
    "error_pages": Field(ERROR_PAGES_SHAPE, None, rule=error_pages_rule, editable=False, since=5),
}, rule=_redirect_fits, shared=True)
