"""/.well-known/acme-challenge/<token>: the key authorization of a pending HTTP-01 challenge.

The node's own orders answer from its challenge store; in a fleet, a token the
node does not hold is read through from the bucket, where the issuer published
it (fleet/challenges.py), so the CA may ask any node."""

from contentnode.http.errors import ApiError
from contentnode.http.response import Response

CHALLENGE_PREFIX = "/.well-known/acme-challenge/"


def answer(req):
    if not req.raw_path.startswith(CHALLENGE_PREFIX):
        return None
    token = req.raw_path[len(CHALLENGE_PREFIX):]
    key_authorization = req.app.tls.challenges.get(token)
    if key_authorization is None:
        req.may_wait()   # read through from the fleet's bucket
        key_authorization = req.app.acme_read_through.get(token, req.client_ip)
    if key_authorization is None:
        raise ApiError(404, "not_found", "no such ACME challenge")
    return Response(200, [("Content-Type", "text/plain"), ("Cache-Control", "no-store")],
                    key_authorization.encode("ascii"))
