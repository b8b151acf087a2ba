"""The admin API under the admin host, on the public side, over HTTPS only.

A public-port hook hands requests whose Host is the configured admin host to
the same admin dispatcher the loopback port uses, marked `via_admin_host`, so
every admin check applies and the admin allow list governs them
(403 ip_not_allowed). Over plain HTTP the admin host is refused: passwords
and session cookies never cross the network unencrypted. It runs after the
ACME challenge hook, so the admin host's own certificate can be renewed.
"""

from contentnode.core.hostnames import host_from_header
from contentnode.daemon import on_start
from contentnode.http.errors import ApiError
from contentnode.http.response import json_response
from contentnode.http.router import AdminDispatcher
from contentnode.public import register_public_hook

HOOK_ORDER = 25  # after ACME challenges (10) and the HTTPS upgrade (20), before content


def admin_host_hook(req):
    admin_host = req.app.admin_host()
    if not admin_host or host_from_header(req.headers.get("Host")) != admin_host:
        return None
    if req.scheme != "https":
        error = ApiError(403, "host_not_allowed", "the admin host answers over HTTPS only")
        return json_response(error.body(), error.status)
    req.via_admin_host = True
    return req.app.admin_over_https(req)


@on_start
def _start(app):
    app.admin_over_https = AdminDispatcher(app, app.routes)


register_public_hook(admin_host_hook, HOOK_ORDER)
