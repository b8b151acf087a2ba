"""The admin API under the admin host, on the public side, over HTTPS only.

This stage hands requests whose Host is the configured admin host to
the same admin dispatcher the loopback port uses, marked `via_admin_host`, so
every admin check applies and the admin allow list governs them
(403 ip_not_allowed). Over plain HTTP the admin host is refused: passwords
and session cookies never cross the network unencrypted. It runs after the
ACME challenge stage, so the admin host's own certificate can be renewed.
"""

from contentnode.http.errors import ApiError


def answer(req):
    admin_host = req.app.admin_gate.admin_host()
    if not admin_host or req.visit.host != admin_host:
        return None
    if req.scheme != "https":
        raise ApiError(403, "host_not_allowed", "the admin host answers over HTTPS only")
    req.may_wait()   # the admin API's handlers write and wait as they need
    req.via_admin_host = True
    return req.app.admin_dispatcher(req)
