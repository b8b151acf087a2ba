"""API errors: a status, a snake_case code and a human message (docs/API.md, "Conventions")."""

from contentnode.http.response import Response, json_response


class ApiError(Exception):
    """Raised anywhere under a handler; the router turns it into the JSON error body."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: dict | None = None, refs: list | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}
        self.refs = refs or []  # the records blocking a 409, as [{"type": "rule", "id": ...}]

    def body(self) -> dict:
        error: dict[str, str | list] = {"code": self.code, "message": self.message}
        if self.field:
            error["field"] = self.field
        if self.refs:
            error["refs"] = self.refs
        return {"error": error}


def invalid(message: str, field: str | None = None) -> ApiError:
    return ApiError(400, "invalid", message, field)


def not_found(message: str = "not found") -> ApiError:
    return ApiError(404, "not_found", message)


def conflict(code: str, message: str, field: str | None = None, refs: list | None = None) -> ApiError:
    return ApiError(409, code, message, field, refs=refs)


def forbidden(code: str, message: str) -> ApiError:
    return ApiError(403, code, message)


def rate_limited(retry_after: float, message: str = "too many attempts; try again later") -> ApiError:
    return ApiError(429, "rate_limited", message, headers={"Retry-After": str(max(1, int(retry_after)))})


def error_response(error: ApiError) -> Response:
    """The JSON answer for an ApiError: the one conversion both ports use."""
    return json_response(error.body(), error.status, error.headers)


INTERNAL_ERROR = ApiError(500, "internal", "internal error")
