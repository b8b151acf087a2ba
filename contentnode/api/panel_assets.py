"""The web panel's files: GET / is index.html, GET /panel/{path...} the rest.

Public rows: the files need no session and hold no data (docs/API.md, "Panel"); the
dispatcher still applies the Host and Origin rules and adds the security
headers (the panel's Content-Security-Policy among them). The files come from
app.panel_files, loaded once at start; a path outside that set is a 404.
"""

from contentnode.http.errors import ApiError
from contentnode.http.response import Response
from contentnode.http.router import Route


def index(req):
    return _serve(req, "index.html")


def asset(req):
    return _serve(req, req.params["path"])


def _serve(req, name: str) -> Response:
    file = req.app.panel_files.get(name)
    if file is None:
        raise ApiError(404, "not_found", "no such file")
    headers = [("Content-Type", file.media_type), ("Cache-Control", "no-cache"), ("ETag", file.etag)]
    if _unchanged(req.headers.get("If-None-Match"), file.etag):
        return Response(304, headers)
    return Response(200, headers, file.body)


def _unchanged(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match compares weakly (RFC 9110 13.1.2): W/"x" matches "x"."""
    if if_none_match is None:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in tags or etag in tags


ROUTES = [
    Route("GET", "/", "public", index, media="text/html"),
    Route("HEAD", "/", "public", index, media="text/html"),
    Route("GET", "/panel/{path...}", "public", asset, media="*/*"),
    Route("HEAD", "/panel/{path...}", "public", asset, media="*/*"),
]
