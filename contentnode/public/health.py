"""GET /healthz on the public port: may a load balancer send traffic here?

Any Host, before every other stage (the admin host and the content rules
never shadow it). 200 {"status":"ok"} while the node serves; 503
{"status":"draining"} from SIGTERM until the listeners close (drain_seconds,
docs/API.md "Health and drain"); 503 {"status":"not_ready"} while
core/readiness.py not_ready() says so. Every process (the daemon and each public worker)
answers from its own public context, so the answer comes from what every process sees:
its draining flag and the state document it follows.
"""

from contentnode.core.readiness import not_ready
from contentnode.http.errors import ApiError
from contentnode.http.response import json_response

PATH = "/healthz"


def answer(req):
    if req.raw_path != PATH:
        return None
    if req.method not in ("GET", "HEAD"):
        raise ApiError(405, "method_not_allowed", "use GET", headers={"Allow": "GET, HEAD"})
    if req.app.draining.is_set():
        return json_response({"status": "draining"}, 503, {"Retry-After": "5"})
    if not_ready(req.app.store.data):
        return json_response({"status": "not_ready"}, 503, {"Retry-After": "5"})
    return json_response({"status": "ok"})
