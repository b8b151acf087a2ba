"""The route table and the admin dispatcher.

Every admin request passes the same checks, in the order of docs/API.md, "Order of checks",
before any handler runs: route and method (404/405 with Allow), Host, Origin,
client address (admin host only), body size (413 from Content-Length, before
reading), chunked bodies (411), content type (415), session (401), 2FA
enrolment (403), scope (403), then unknown query parameters, the If-Match
header, JSON parsing and the declared body shape (400), and last, on a
fleet replica, a write to a shared object (409 managed_by_fleet). A refused request
changes nothing, because no handler has run. A handler whose object moved on
since the If-Match revision raises core.revisions.StaleRevision: 412.
"""

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import unquote

from contentnode.core.fields import FieldError
from contentnode.core.revisions import ANY, StaleRevision
from contentnode.core.text import encodable
from contentnode.http import schema
from contentnode.http.errors import INTERNAL_ERROR, ApiError, error_response
from contentnode.http.response import Response, json_response

log = logging.getLogger("contentnode.http")

MAX_BODY = 65536
PUBLIC, LOGIN = "public", "login"
STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
_PARAM = re.compile(r"\{(\w+)\}")
_REST = re.compile(r"/\{(\w+)\.\.\.\}$")  # a last segment {name...} takes the rest of the path
_ENTITY_TAG = re.compile(r'"([1-9][0-9]{0,14})"')  # a revision as the ETag header gives it


@dataclass(frozen=True)
class Route:
    """One row of the table: method, path pattern, access, handler.

    access is "public", "login" or a scope such as "domains:write".
    enrolment_exempt rows stay reachable for a user who must still enrol in 2FA.
    query names the query parameters the handler reads; any other is refused
    (400 invalid naming it), so a typo never silently widens an answer.
    status and media are the success status and content type; body, where
    declared, the JSON schema of the request body (checked here, published by
    http/openapi.py); body_optional rows also take no body at all. answer, where
    declared, the JSON schema of the success body (published only). if_match
    rows change one revisioned object and take If-Match (req.if_match); any
    other row refuses the header. token_session=False rows answer a session
    opened with an API token 403 forbidden, whatever its scopes: the rows that
    touch a person's own credentials and sessions, or make, arm or unlock other
    accounts (docs/API.md, "What a token session may and may not do").
    fleet_shared rows write what a fleet shares
    (docs/API.md, Fleet): a replica refuses them; fleet_shared_fields rows only
    when the body names one of those members (PUT /api/settings).
    upstream rows call a server the operator named (a bucket, an update feed, an
    ACME CA) and answer its failure 502 (published as such).
    """

    method: str
    pattern: str
    access: str
    handler: Callable
    enrolment_exempt: bool = False
    query: frozenset = frozenset()
    status: int = 200
    media: str = "application/json"
    body: dict | None = field(default=None, hash=False, compare=False)
    if_match: bool = False
    body_optional: bool = False
    answer: dict | None = field(default=None, hash=False, compare=False)
    token_session: bool = True
    fleet_shared: bool = False
    fleet_shared_fields: frozenset = frozenset()
    upstream: bool = False


class RouteTable:
    """Static paths in a dict, patterned paths by segment count: lookups stay cheap.

    A row ending in {name...} (literal before it) matches every longer path
    under its prefix, one or more segments; it is tried only when no other row
    knows the path.
    """

    def __init__(self, routes):
        self.routes = list(routes)
        self._static = {}
        self._patterned = {}
        self._rest = {}  # prefix -> {method: (route, parameter name)}
        for route in self.routes:
            rest = _REST.search(route.pattern)
            if rest:
                prefix = route.pattern[:rest.start()]
                if "{" in prefix:
                    raise ValueError(f"{route.pattern}: only the last segment may take the rest of the path")
                self._rest.setdefault(prefix, {})[route.method] = (route, rest.group(1))
            elif _PARAM.search(route.pattern):
                if _PARAM.search("/".join(route.pattern.strip("/").split("/")[:2])):
                    raise ValueError(f"{route.pattern}: the first two segments must be literal")
                segments = route.pattern.strip("/").split("/")
                self._patterned.setdefault(self._key(segments), []).append((segments, route))
            else:
                self._static.setdefault(route.pattern, {})
                if route.method in self._static[route.pattern]:
                    raise ValueError(f"duplicate route {route.method} {route.pattern}")
                self._static[route.pattern][route.method] = route

    @staticmethod
    def _key(segments) -> tuple:
        """Patterned rows are indexed by segment count and their first two (literal) segments."""
        return len(segments), segments[0], segments[1] if len(segments) > 1 else ""

    def match(self, method: str, raw_path: str):
        """(route, params) for the request, or raise 404 / 405 with Allow."""
        methods = self._static.get(raw_path)
        params: dict[str, str] = {}
        if methods is None:
            methods = {}
            segments = raw_path.strip("/").split("/")
            for pattern, route in self._patterned.get(self._key(segments), ()):
                found = _match_segments(pattern, segments)
                if found is not None and route.method not in methods:
                    methods[route.method] = (route, found)
            if not methods:
                methods = self._match_rest(raw_path)
            if method in methods:
                return methods[method]
            methods = {m: r for m, (r, _) in methods.items()}
        elif method in methods:
            return methods[method], params
        if not methods:
            raise ApiError(404, "not_found", "no such endpoint")
        allow = ", ".join(sorted(methods))
        raise ApiError(405, "method_not_allowed", f"method {method} is not allowed here; allowed: {allow}",
                       headers={"Allow": allow})

    def _match_rest(self, raw_path: str) -> dict:
        for prefix, rows in self._rest.items():
            if raw_path.startswith(prefix + "/") and len(raw_path) > len(prefix) + 1:
                try:
                    value = unquote(raw_path[len(prefix) + 1:], errors="strict")
                except UnicodeDecodeError:
                    return {}
                return {method: (route, {name: value}) for method, (route, name) in rows.items()}
        return {}


def _match_segments(pattern, segments):
    params = {}
    for want, got in zip(pattern, segments):
        if want.startswith("{") and want.endswith("}"):
            if not got:
                return None
            try:
                params[want[1:-1]] = unquote(got, errors="strict")
            except UnicodeDecodeError:
                return None
        elif want != got:
            return None
    return params


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class AdminDispatcher:
    """Runs the checks of docs/API.md, "Order of checks", then the handler; turns errors into JSON bodies.

    `gate` answers the questions of the checks (auth/gate.py AdminGate: authenticate, must_enrol,
    authorize, network_allowed, admin_host, replica_primary); `audit` (core/audit.py AuditLog) is where
    req.audit() writes; `handler_context` is what a handler reaches as req.app (built by the composition
    root: api/context.py AdminContext), which neither the dispatcher nor the request itself ever asks anything.
    """

    def __init__(self, table: RouteTable, gate, audit, handler_context):
        self.table = table
        self.gate = gate
        self.audit = audit
        self.handler_context = handler_context

    def __call__(self, req) -> Response:
        req.app = self.handler_context
        req.audit_log = self.audit
        try:
            self._check_and_run(req)
            response = self._run(req)
        except (ApiError, FieldError) as error:
            if isinstance(error, FieldError):  # a core record rule broken: 400 naming the field
                error = ApiError(400, "invalid", error.message, error.field)
            response = error_response(error)
            if (req.content_length or 0) > 0 and not req.raw_body or req.chunked:
                req.close_after()  # an unread body would be parsed as the next request
        except StaleRevision as stale:  # If-Match named an older revision: nothing was changed
            response = error_response(ApiError(412, "precondition_failed", stale.message,
                                               headers={"ETag": f'"{stale.current}"'}))
        except (ConnectionError, TimeoutError):
            raise
        except Exception:
            log.exception("handler failed: %s %s", req.method, req.raw_path)
            response = error_response(INTERNAL_ERROR)
        response.headers.extend(SECURITY_HEADERS)
        return response

    def _check_and_run(self, req) -> None:
        route, params = self.table.match(req.method, req.raw_path)
        req.route, req.params = route, params
        self._check_host(req)
        self._check_origin(req)
        if not self.gate.network_allowed(req):
            raise ApiError(403, "ip_not_allowed", "this address is not on the admin allow list")
        self._check_body_headers(req)
        self.gate.authenticate(req)
        if route.access != PUBLIC:
            if req.user is None:
                raise ApiError(401, "unauthenticated", "log in first")
            if not route.enrolment_exempt and self.gate.must_enrol(req.user, req.api_token):
                raise ApiError(403, "two_factor_enrollment_required",
                               "two-factor authentication must be set up before using this endpoint")
            if req.api_token is not None and not route.token_session:
                raise ApiError(403, "forbidden", "a session opened with an API token cannot reach this endpoint: "
                                                 "accounts, credentials, sessions and the security policy are "
                                                 "changed by a person logged in with a password")
            if route.access != LOGIN and not self.gate.authorize(req.user, route.access):
                raise ApiError(403, "forbidden", f"this needs the {route.access} scope")
        _check_query(req)
        _check_if_match(req)
        self._parse_body(req)
        if isinstance(req.body, dict) and "revision" in req.body:
            raise ApiError(400, "invalid", "revision is read-only (the node raises it with every change); to make "
                                           'a change conditional, send the revision you read as If-Match: "<revision>"',
                           "revision")
        if route.body is not None and not (route.body_optional and req.body is None):
            schema.check(route.body, req.body)
        elif route.body is None and req.body not in (None, {}):
            _refuse_body(req)
        if route.fleet_shared or (route.fleet_shared_fields and isinstance(req.body, dict)
                                  and route.fleet_shared_fields & req.body.keys()):
            self._check_fleet_write(req)

    def _check_fleet_write(self, req) -> None:
        """On a replica the primary owns shared objects: name it, change nothing."""
        primary = self.gate.replica_primary()
        if primary is not None:
            raise ApiError(409, "managed_by_fleet", f"this node is a fleet replica: shared objects are "
                                                    f"changed on the primary, {primary}")

    def _run(self, req) -> Response:
        result = req.route.handler(req)
        return result if isinstance(result, Response) else json_response(result)

    def _check_host(self, req) -> None:
        name = req.host_name()
        if name in LOOPBACK_HOSTS or (name and name == self.gate.admin_host()):
            return
        raise ApiError(403, "host_not_allowed", "this Host is not allowed on the admin API")

    def _check_origin(self, req) -> None:
        origin = req.headers.get("Origin")
        if origin is None or req.method not in STATE_CHANGING:
            return
        expected = {f"http://{req.host}", f"https://{req.host}"}
        if origin.strip().lower() not in expected:
            raise ApiError(403, "cross_origin", "the Origin of this request does not match its Host")

    def _check_body_headers(self, req) -> None:
        length = req.content_length
        if length == -1:
            raise ApiError(400, "invalid", "Content-Length is malformed")
        if length is not None and length > MAX_BODY:
            raise ApiError(413, "payload_too_large", f"the body is larger than {MAX_BODY} bytes")
        if req.chunked:
            raise ApiError(411, "length_required", "chunked bodies are not accepted; send Content-Length")
        content_type = req.headers.get("Content-Type")
        if (length or 0) > 0 or content_type is not None:
            if not _is_json(content_type or ""):
                raise ApiError(415, "unsupported_media_type", "bodies must be sent as Content-Type: application/json")

    def _parse_body(self, req) -> None:
        data = req.read_body()
        if not data:
            return
        try:
            body = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ApiError(400, "bad_json", f"the body is not valid JSON: {exc}") from None
        except RecursionError:
            raise ApiError(400, "bad_json", "the body is nested too deeply") from None
        if body is None:  # else indistinguishable from no body at all
            raise ApiError(400, "invalid", "a body of JSON null is not accepted; send no body instead")
        bad = _invalid_text_field(body)
        if bad is not None:
            raise ApiError(400, "bad_json", "the body holds text that is not valid Unicode (a lone surrogate)",
                           bad or None)
        req.body = body


def _check_query(req) -> None:
    unknown = sorted(set(req.query) - req.route.query)
    if unknown:
        raise ApiError(400, "invalid", f"unknown query parameter {unknown[0]!r}", unknown[0][:100])


def _refuse_body(req) -> None:
    """A row that declares no body takes none: members sent to it would be silently ignored."""
    member = next(iter(req.body), None) if isinstance(req.body, dict) else None
    what = f"has no member {member!r}" if member is not None else "takes no body"
    raise ApiError(400, "invalid", f"{req.route.method} {req.route.pattern} {what}; send no body",
                   member[:100] if member is not None else None)


def _check_if_match(req) -> None:
    """req.if_match from the header: None (absent), "*" or the revision number it names."""
    value = req.headers.get("If-Match")  # repeated headers arrive joined: "1", "2" is refused below
    if value is None:
        return
    if not req.route.if_match:
        raise ApiError(400, "invalid", "If-Match is taken only where a revisioned object is changed "
                                       "(PUT or DELETE of a rule, domain, bucket, user, settings, policy or "
                                       "notifications)", "If-Match")
    value = value.strip()
    if value == ANY:
        req.if_match = ANY
        return
    found = _ENTITY_TAG.fullmatch(value)
    if found is None:
        raise ApiError(400, "invalid", 'If-Match must be one revision in quotes, as the ETag header gives it '
                                       '(If-Match: "3"), or *', "If-Match")
    req.if_match = int(found.group(1))


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


def _invalid_text_field(body):
    """None when every string (keys included) encodes as UTF-8 (no lone surrogates from \\u escapes);
    else the top-level field holding the bad text ("" when it cannot be named)."""
    if isinstance(body, dict):
        for key, value in body.items():
            if not _valid_text(key):
                return ascii(key)[1:-1][:100]  # named with \\u escapes, as it can be sent back
            if not _valid_text(value):
                return key
        return None
    return None if _valid_text(body) else ""


def _valid_text(value) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and not encodable(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


# The panel's policy (docs/API.md, "Panel") on every admin answer: a JSON body opened as a page runs nothing either.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
SECURITY_HEADERS = (
    ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)
