"""The public port: the verification page first, then the registered public hooks.

Hooks (ACME challenges, redirects, the admin host, the content path) are
functions `hook(req) -> Response | None`, tried in order of their `order`
number; the first answer wins. Nothing here reads a request body.
"""

import logging

from contentnode.core import verify
from contentnode.http.errors import ApiError
from contentnode.http.response import json_response

log = logging.getLogger("contentnode.public")

CHECK_PATH = "/.well-known/service/check"
_HOOKS = []  # (order, hook)


def register_public_hook(hook, order: int) -> None:
    _HOOKS.append((order, hook))
    _HOOKS.sort(key=lambda item: item[0])


def verification_page(req):
    nonce = req.query.get("nonce")
    if not verify.valid_nonce(nonce):
        raise ApiError(400, "invalid", "nonce must be 16 to 128 characters of A-Z a-z 0-9 _ -", "nonce")
    node = req.app.store.data["node"]
    return json_response({"node": node["id"], "nonce": nonce,
                          "proof": verify.proof(bytes.fromhex(node["secret"]), nonce)})


class PublicDispatcher:
    def __init__(self, app):
        self.app = app

    def __call__(self, req):
        req.app = self.app
        if (req.content_length or 0) > 0 or req.chunked:
            req.close_after()  # public requests never have their body read
        try:
            if req.raw_path == CHECK_PATH:
                if req.method not in ("GET", "HEAD"):
                    raise ApiError(405, "method_not_allowed", "use GET", headers={"Allow": "GET, HEAD"})
                return verification_page(req)
            for _, hook in _HOOKS:
                response = hook(req)
                if response is not None:
                    return response
            raise ApiError(404, "not_found", "nothing is served here")
        except ApiError as error:
            return json_response(error.body(), error.status, error.headers)
        except (ConnectionError, TimeoutError):
            raise
        except Exception:
            log.exception("public request failed: %s %s", req.method, req.raw_path)
            return json_response({"error": {"code": "internal", "message": "internal error"}}, 500)
