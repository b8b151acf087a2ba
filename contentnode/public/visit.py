"""What every stage of the public pipeline may rely on: the request target checked once, the Host parsed once.

A hostile target (control bytes raw or percent-encoded, a `%` not followed by
two hex digits, bytes that are not UTF-8 once decoded, more than MAX_TARGET
bytes) is answered 400 before any stage runs, so no stage can echo it into a
header (a redirect's Location) or a log line and fail with a 500. What only
the content stage refuses (encoded slashes, dot segments) stays there.
"""

from typing import NamedTuple

from contentnode.core.hostnames import host_from_header
from contentnode.core.paths import CONTROL, MAX_PATH_BYTES, PathError, decode_path
from contentnode.http.errors import ApiError

MAX_TARGET_BYTES = 8192     # path and query; a redirect echoes the whole target into its Location


class Visit(NamedTuple):
    """A public request's target as the stages read it (a tuple: made on every request, cheaply)."""

    host: str | None   # the normalised Host header without its port; None when absent or unusable
    path: str          # the percent-decoded path
    now: float         # the node clock's time, taken once: the cache's freshness, Age, the traffic minute
    doc: dict          # the state document as the request began: an answer given again holds for it (prepared.py)


def parse(req) -> Visit:
    """The Visit of a request, or a 400 ApiError for a hostile target."""
    context = req.app
    return Visit(host_from_header(req.headers.get("Host")), checked_target(req.target), context.clock.now(),
                 context.store.data)


def checked_target(target: str) -> str:
    """The decoded path of a request target (path and query as sent), or a 400 ApiError."""
    raw_path, _, query = target.partition("?")
    if len(target) > MAX_TARGET_BYTES or len(raw_path) > MAX_PATH_BYTES:
        raise ApiError(400, "invalid", "the request target is too long")
    if query and CONTROL.search(query):
        raise ApiError(400, "invalid", "control characters are not allowed in the request target")
    path = _DECODED.get(raw_path)
    if path is None:
        path = _decoded(raw_path)
        if len(raw_path) <= _DECODED_KEY_MAX:
            if len(_DECODED) >= _DECODED_MAX:
                _DECODED.clear()   # bounded: paths come from anonymous clients
            _DECODED[raw_path] = path
    return path


_DECODED: dict[str, str] = {}   # raw path -> decoded path, for paths that passed (hits repeat them)
_DECODED_MAX = 4096
_DECODED_KEY_MAX = 512          # longer paths are checked every time: the map holds at most ~2 MiB of keys


def _decoded(raw_path: str) -> str:
    if not raw_path.startswith("/"):
        raise ApiError(400, "invalid", "the path must start with /")
    if CONTROL.search(raw_path):
        raise ApiError(400, "invalid", "control characters are not allowed in the request target")
    if not raw_path.isascii():   # raw UTF-8 (curl sends it so); the request line arrives as Latin-1 text
        try:
            raw_path = raw_path.encode("latin-1").decode("utf-8")
        except UnicodeError:
            raise ApiError(400, "invalid", "the request path is not valid UTF-8") from None
    try:
        return decode_path(raw_path)
    except PathError as exc:
        raise ApiError(400, "invalid", str(exc)) from None
