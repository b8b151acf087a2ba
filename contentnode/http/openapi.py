"""The OpenAPI 3.1 document of the admin API, built from the route table alone.

Every operation comes from one Route row (method, pattern, access as
`x-scope`, `x-token-session: false` on the rows a session opened with an
API token may not reach, declared query parameters, If-Match on the rows that take it,
success status, request body schema), so the document cannot drift from
what the dispatcher serves. No business
logic here: `make openapi` writes the same document to docs/openapi.json.
"""

import re

from contentnode.http.router import LOGIN, PUBLIC

_RECORD_MEMBERS = {"host", "domain", "id", "url", "urls"}
_PARAM = re.compile(r"\{(\w+)(?:\.\.\.)?\}")  # {name...} takes the rest of the path

ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "pattern": "^[a-z0-9_]+$"},
            "message": {"type": "string"},
            "field": {"type": "string"},
            "refs": {"type": "array", "items": {
                "type": "object", "required": ["type", "id"],
                "properties": {"type": {"type": "string"}, "id": {"type": "string"}}}},
        },
    }},
}

_ERROR_TEXT = {
    400: "bad_json or invalid (field names the input; If-Match when that header is malformed)",
    401: "unauthenticated",
    403: "forbidden (missing scope), host_not_allowed, cross_origin, ip_not_allowed, "
         "two_factor_enrollment_required",
    404: "not_found",
    405: "method_not_allowed (with Allow)",
    409: "conflict, in_use, last_admin, setup_done (refs name blocking records)",
    411: "length_required",
    412: "precondition_failed: If-Match names a revision the object has moved on from; nothing changed "
         "(ETag gives the current one)",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "rate_limited (with Retry-After)",
    500: "internal",
    502: "the server the row calls failed: backup_bucket_failed, update_check_failed, acme_failed",
}


IF_MATCH = {
    "name": "If-Match", "in": "header", "required": False,
    "description": 'The revision read before (the ETag, quoted: "3"), or *. Another revision is refused with '
                   "412 precondition_failed and nothing changes; without the header the change applies.",
    "schema": {"type": "string", "pattern": '^(\\*|"[1-9][0-9]{0,14}")$'},
}
ETAG = {"description": 'The revision of the object answered, quoted ("3"): send it back as If-Match.',
        "schema": {"type": "string", "pattern": '^"[1-9][0-9]*"$'}}


def _error(status: int) -> dict:
    return {"description": _ERROR_TEXT[status], "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _takes_body(route) -> bool:
    return route.body is not None or route.method in ("POST", "PUT")


def _error_statuses(route) -> list[int]:
    """The errors the dispatcher's checks can give this row, plus the handler's usual ones."""
    statuses = {400, 403, 500}
    if route.access != PUBLIC or route.pattern.startswith("/api/"):
        statuses.add(401)  # a session missing, or (login, 2FA) bad credentials
    if _PARAM.search(route.pattern) or route.method in ("PUT", "DELETE") or _names_a_record(route):
        statuses.add(404)
    if _takes_body(route):
        statuses.update({411, 413, 415})
    if route.method in ("POST", "PUT", "DELETE"):
        statuses.add(409)
    if route.pattern in ("/api/login", "/api/setup", "/api/login/2fa") or "password" in route.pattern \
            or _asks_own_password(route):
        statuses.add(429)
    if route.if_match:
        statuses.add(412)
    if route.upstream:
        statuses.add(502)
    return sorted(statuses)


def _names_a_record(route) -> bool:
    """A body member that names a stored domain or bucket (or a URL on a domain): it may be unknown."""
    return bool(_RECORD_MEMBERS & set((route.body or {}).get("properties", {})))


def _asks_own_password(route) -> bool:
    """A session's row whose body takes the caller's password: wrong ones count like failed logins."""
    members = (route.body or {}).get("properties", {})
    return "current_password" in members or (route.access == LOGIN and "password" in members)


def _operation(route) -> dict:
    parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
                  for name in _PARAM.findall(route.pattern)]
    parameters += [{"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
                   for name in sorted(route.query)]
    if route.if_match:
        parameters.append(IF_MATCH)
    success: dict
    if route.status == 204:
        success = {"description": "done, no body"}
    elif route.media != "application/json":
        success = {"description": "success", "content": {route.media: {"schema": {"type": "string"}}}}
    else:
        success = {"description": "success",
                   "content": {"application/json": {"schema": route.answer or {"type": "object"}}}}
        if route.if_match:
            success["headers"] = {"ETag": ETAG}
    operation = {
        "operationId": _operation_id(route),
        "summary": (route.handler.__doc__ or route.handler.__name__).strip().splitlines()[0],
        "x-scope": route.access,
        "responses": {str(route.status): success, **{str(s): _error(s) for s in _error_statuses(route)}},
    }
    if not route.token_session:
        operation["x-token-session"] = False  # a session opened with an API token gets 403 here
    if parameters:
        operation["parameters"] = parameters
    if _takes_body(route):
        schema = route.body if route.body is not None else {"type": "object"}
        operation["requestBody"] = {"required": route.body is not None and not route.body_optional,
                                    "content": {"application/json": {"schema": schema}}}
    return operation


def path_template(pattern: str) -> str:
    """The OpenAPI path of a row: `{name...}` (the rest of the path) is written `{name}`."""
    return _PARAM.sub(r"{\1}", pattern)


def _operation_id(route) -> str:
    words = re.sub(r"[^a-z0-9]+", "_", route.pattern.replace("{", "by_").replace("...", "").lower()).strip("_")
    return f"{route.method.lower()}_{words}"


def build(routes, version: str, cookie: str) -> dict:
    """The whole document for these Route rows, in route-table order."""
    paths: dict = {}
    for route in routes:
        paths.setdefault(path_template(route.pattern), {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {"title": "contentnode admin API", "version": version,
                 "description": "Generated from the route table. Every operation but public ones needs the "
                                f"session cookie {cookie} from POST /api/login (securitySchemes.session); x-scope "
                                f"is the access it needs: '{PUBLIC}', '{LOGIN}' (any session) or a scope name."},
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {"session": {"type": "apiKey", "in": "cookie", "name": cookie}},
        },
    }
