"""A domain with a redirect answers every request with it (set by POST /api/domains/redirect)."""

import json

from contentnode.http.response import Response
from contentnode.services.delivery import redirect_location


def answer(req):
    host = req.visit.host
    found = redirect_location(req.app.store.data["domains"].get(host) if host else None, req.target)
    if found is None:
        return None
    code, where = found
    return Response(code, [("Location", where), ("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                    json.dumps({"redirect": where}).encode() + b"\n")
