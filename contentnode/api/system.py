"""Health and Prometheus metrics: reachable without login (loopback admin port only)."""

from contentnode.core.metrics import CONTENT_TYPE
from contentnode.http.response import Response
from contentnode.http.router import Route


def healthz(req):
    return {"status": "ok"}


def metrics(req):
    body = req.app.metrics.registry.render().encode()
    return Response(200, [("Content-Type", CONTENT_TYPE), ("Cache-Control", "no-store")], body)



ROUTES = [
    Route("GET", "/healthz", "public", healthz),
    Route("GET", "/metrics", "public", metrics),
]
