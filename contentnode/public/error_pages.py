"""A domain's `error_pages` on the public port: the content stage's error answer with a page from a bucket.

When the content stage refuses or fails a request for a domain of the node,
the domain's `error_pages` may name a bucket key for that status ("404") or
its class ("5xx"). The page is read from the bucket of the rule the path
matched (or, when none did, the domain's "/" rule) through the cache like
content, under a cache key of its own naming the bucket (so it never stands
for the object a path maps to, nor for another bucket's page), and sent with the error's status and fields. A page that
cannot be read (missing, the origin failing) leaves the node's plain JSON
answer: reading a page never asks for another page, so nothing loops.
"""

from contentnode.core import domains
from contentnode.http.errors import ApiError
from contentnode.http.response import Response
from contentnode.services.delivery import NotServed, Target, fetch

PAGE = "error-page"   # in the cache key's third part (an image variant's place): pages apart from content


def answer(req, host: str | None, error: ApiError) -> Response | None:
    """The error answer with the domain's page for its status, or None for the plain answer."""
    doc = req.app.store.data
    domain = doc["domains"].get(host) if host else None
    key = domains.error_page(domain and domain["error_pages"], error.status)
    if host is None or key is None:
        return None
    delivery = req.app.delivery
    index = delivery.rule_index(doc)
    match = index.match(host, req.visit.path) or index.match(host, "/")
    if match is None:
        return None
    rule = match.rule
    target = Target(host, "/" + key, rule["id"], rule, doc["buckets"].get(rule["bucket"]), key, None,
                    match.edge)
    target.cache_key = (host, target.path, f"{PAGE} {rule['bucket']}")   # one bucket's page is not another's
    req.may_wait()   # a bucket read: a listener's loop thread hands the request to the pool
    try:
        result = fetch(delivery, target)
    except NotServed:
        return None
    headers = [("Content-Type", result.meta.get("content_type") or "application/octet-stream"),
               ("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff"), *error.headers.items()]
    return Response(error.status, headers, result.sendable(0, result.size), head_only=req.method == "HEAD")
