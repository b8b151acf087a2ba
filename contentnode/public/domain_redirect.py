"""A domain with a redirect answers every request with it (set by POST /api/domains/redirect)."""

import json

from contentnode.http.response import Response


def location(domain: dict | None, target: str) -> tuple[int, str] | None:
    """(status, Location) a domain's redirect answers for a request target, or None without one.

    The stage below and POST /api/diagnose both ask this, so they never disagree.
    """
    redirect = domain and domain["redirect"]
    if not redirect:
        return None
    to = redirect["to"]
    return redirect["code"], (to.rstrip("/") + target if redirect["keep_path"] else to)


def answer(req):
    host = req.visit.host
    found = location(req.app.store.data["domains"].get(host) if host else None, req.target)
    if found is None:
        return None
    code, where = found
    return Response(code, [("Location", where), ("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                    json.dumps({"redirect": where}).encode() + b"\n")
