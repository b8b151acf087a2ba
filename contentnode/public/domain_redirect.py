"""A domain with a redirect answers every request with it (set by POST /api/domains/redirect)."""

import json

from contentnode.http.response import Response


def answer(req):
    host = req.visit.host
    record = req.app.store.data["domains"].get(host) if host else None
    redirect = record and record.get("redirect")
    if not redirect:
        return None
    location = redirect["to"]
    if redirect["keep_path"]:
        location = location.rstrip("/") + req.target
    return Response(redirect["code"], [("Location", location), ("Content-Type", "application/json"),
                                        ("Cache-Control", "no-store")],
                    json.dumps({"redirect": location}).encode() + b"\n")
