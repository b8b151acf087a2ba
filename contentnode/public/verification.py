"""GET /.well-known/service/check?nonce=N: the proof that a domain leads to this node."""

from contentnode.core import verify
from contentnode.http.errors import ApiError
from contentnode.http.response import json_response


def answer(req):
    if req.raw_path != verify.CHECK_PATH:
        return None
    if req.method not in ("GET", "HEAD"):
        raise ApiError(405, "method_not_allowed", "use GET", headers={"Allow": "GET, HEAD"})
    nonce = req.query.get("nonce")
    if not verify.valid_nonce(nonce):
        raise ApiError(400, "invalid", "nonce must be 16 to 128 characters of A-Z a-z 0-9 _ -", "nonce")
    node = req.app.store.data["node"]
    return json_response({"node": node["id"], "nonce": nonce,
                          "proof": verify.proof(bytes.fromhex(node["secret"]), nonce)})
