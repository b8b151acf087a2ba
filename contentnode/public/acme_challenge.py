"""/.well-known/acme-challenge/<token>: the key authorization of a pending HTTP-01 challenge."""

from contentnode.http.errors import ApiError
from contentnode.http.response import Response

CHALLENGE_PREFIX = "/.well-known/acme-challenge/"


def answer(req):
    if not req.raw_path.startswith(CHALLENGE_PREFIX):
        return None
    key_authorization = req.app.tls.challenges.get(req.raw_path[len(CHALLENGE_PREFIX):])
    if key_authorization is None:
        raise ApiError(404, "not_found", "no such ACME challenge")
    return Response(200, [("Content-Type", "text/plain"), ("Cache-Control", "no-store")],
                    key_authorization.encode("ascii"))
