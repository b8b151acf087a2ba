"""Health and Prometheus metrics (no login, loopback admin port only) and the API's own OpenAPI document."""

from contentnode import __version__
from contentnode.auth.sessions import COOKIE
from contentnode.core.metrics import CONTENT_TYPE
from contentnode.http import openapi
from contentnode.http.response import Response
from contentnode.http.router import Route


def healthz(req):
    return {"status": "ok"}


def metrics(req):
    body = req.app.metrics.render().encode()
    return Response(200, [("Content-Type", CONTENT_TYPE), ("Cache-Control", "no-store")], body)


def openapi_document(req):
    """The OpenAPI 3.1 document of this node's route table (docs/openapi.json holds the same)."""
    return openapi.build(req.app.routes.routes, __version__, COOKIE)



ROUTES = [
    Route("GET", "/healthz", "public", healthz),
    Route("GET", "/api/openapi.json", "login", openapi_document),
    Route("GET", "/metrics", "public", metrics, media="text/plain"),
]
