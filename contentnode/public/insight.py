"""What one public content request adds to the traffic insight (core/traffic_top.py, traffic_tail.py).

Only requests for the node's own domains are counted. The path is the
request's path without its query string (cut at MAX_PATH characters), the
client address is kept as the `client_addresses` setting allows (truncated by
default), the referer as its host name only; the country is the one an edge
control looked up for the request (req.country), when there is one.
"""

from contentnode.core.settings import GENERAL_DEFAULTS
from contentnode.core.traffic_top import MAX_PATH, client_view, referer_host

DEFAULT_CLIENT_MODE = GENERAL_DEFAULTS["client_addresses"]


def count(req, host: str, status: int, sent: int, cached: str | None) -> None:
    """Runs on every content request: only tuples appended here, the counting comes later in bulk."""
    app = req.app
    client = client_view(req.client_ip, app.settings.get("client_addresses", DEFAULT_CLIENT_MODE))
    path = req.raw_path[:MAX_PATH]
    referer = referer_host(req.headers.get("Referer"))
    cache = cached or "none"
    now = app.clock.now()
    app.traffic_top.record((host, int(now) // 60 * 60, path, client, referer, str(status), cache, req.country, sent))
    app.traffic_tail.record((int(now), host, req.method, path, status, sent, cache, client, referer, req.country))
