"""The public content stage: the HTTP answer of the content engine (services/delivery.py).

Redirects of a whole domain are answered by an earlier stage (domain_redirect);
this stage is the last one and answers everything that reaches it, so every
content request is counted in the traffic series. The engine resolves the
visit and hands over a cache Result; the Result says which body it is sent as
(bytes, a file span, a stream), so this stage only decides 200, 206 or 304,
the ranges and the headers, and turns the engine's refusals into the JSON
error answer.
"""

import re

from contentnode.core import encodings
from contentnode.core.metrics import REFUSALS
from contentnode.core.text import http_date
from contentnode.http.errors import ApiError, error_response
from contentnode.http.response import Response
from contentnode.public import edge_guard, error_pages, shared_answer
from contentnode.services import origin_mode
from contentnode.services.delivery import (NotServed, Target, content_path, fetch, fetch_held, held_in_memory,
                                           resolve)

_RANGE = re.compile(r"(\d{0,18})-(\d{0,18})")


# ---------------------------------------------------------------- answering


def _etag_list_matches(header: str, etag: str | None) -> bool:
    if header.strip() == "*":
        return etag is not None
    strip = lambda tag: tag.strip().removeprefix("W/")  # noqa: E731 - weak comparison
    return etag is not None and strip(etag) in {strip(t) for t in header.split(",")}


def not_modified(headers, meta: dict) -> bool:
    """If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)."""
    inm = headers.get("If-None-Match")
    if inm is not None:
        return _etag_list_matches(inm, meta.get("etag"))
    since = http_date(headers.get("If-Modified-Since"))
    if since is None:
        return False
    modified = http_date(meta.get("last_modified"))
    return modified is not None and modified <= since


def _unsatisfiable(size: int) -> ApiError:
    return ApiError(416, "range_not_satisfiable", "the requested range cannot be served",
                    headers={"Content-Range": f"bytes */{size}"})


def _if_range_holds(validator: str, meta: dict) -> bool:
    """If-Range compares strongly (RFC 9110 13.1.5): a weak tag, sent or current, never matches,
    since a weak tag may stay while the bytes change and a range of other bytes would corrupt
    the client's copy. A date must be the Last-Modified exactly."""
    if validator.startswith(('"', "W/")):
        etag = meta.get("etag")
        return isinstance(etag, str) and etag.startswith('"') and validator == etag
    return validator == meta.get("last_modified")


def byte_range(headers, size: int, meta: dict):
    """(start, end) exclusive for one satisfiable byte range, None for the whole object.

    A malformed or unsatisfiable byte range is a 416; several ranges, another
    unit and a stale If-Range get the whole object (RFC 9110 allows ignoring them).
    """
    header = headers.get("Range")
    if header is None:
        return None
    if_range = headers.get("If-Range")
    if if_range is not None and not _if_range_holds(if_range.strip(), meta):
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    found = _RANGE.fullmatch(spec.strip())
    if found is None or found.group(1) == found.group(2) == "" or size == 0:
        raise _unsatisfiable(size)
    first, last = found.groups()
    if not first:
        if int(last) == 0:
            raise _unsatisfiable(size)
        return max(0, size - int(last)), size
    start = int(first)
    if start >= size or (last and int(last) < start):
        raise _unsatisfiable(size)
    return start, (min(size, int(last) + 1) if last else size)


def _fixed_headers(target: Target, result, cache: str) -> list:
    meta, ttl = result.meta, target.ttl
    signed = target.rule["signed"]
    cache_control = "no-cache" if ttl <= 0 else f"{'private' if signed else 'public'}, max-age={ttl}"
    out = [("Content-Type", meta.get("content_type") or "application/octet-stream"),
           ("Cache-Control", cache_control), ("Accept-Ranges", "bytes"),
           ("X-Content-Type-Options", "nosniff"), ("X-Cache", cache)]
    if meta.get("etag"):
        out.append(("ETag", meta["etag"]))
    if meta.get("last_modified"):
        out.append(("Last-Modified", meta["last_modified"]))
    coding = meta.get("encoded") or meta.get("content_encoding")   # the node's variant, or the origin's
    if coding:
        out.append(("Content-Encoding", coding))
    if meta.get("encoded") or target.compress and encodings.compressible(meta, result.size):
        out.append(("Vary", "Accept-Encoding"))   # every answer of an object sent compressed to some
    return target.edge.added(out)   # the rule's `headers` (public/edge_guard.py dressed)


def _headers(req, target: Target, result) -> list:
    """The object's headers; a hit's are made once per cache entry and target, plus its Age."""
    if not result.hit:
        return _fixed_headers(target, result, "MISS")
    coding = result.meta.get("encoded", "")
    entry, fixed = target.hit_headers.get(coding, (None, None))
    if entry is not result.entry:
        entry, fixed = target.hit_headers[coding] = (result.entry, _fixed_headers(target, result, "HIT"))
    return fixed + [("Age", str(max(0, int(req.visit.now - entry.stored_at))))]


# representation metadata a 304 leaves out (RFC 9110 15.4.5): the cached 200's stands
_NOT_IN_304 = frozenset({"Content-Type", "Content-Encoding", "Accept-Ranges"})


def object_response(req, result, target: Target) -> Response:
    """The 200, 206 or 304 answer for a cache Result (which it takes ownership of)."""
    headers = _headers(req, target, result)
    try:
        if not_modified(req.headers, result.meta):
            result.close()
            return Response(304, [h for h in headers if h[0] not in _NOT_IN_304])
        span = byte_range(req.headers, result.size, result.meta)
    except ApiError:
        result.close()
        raise
    if span is None:
        return Response(200, headers, result.sendable(0, result.size), head_only=req.method == "HEAD")
    start, end = span
    headers.append(("Content-Range", f"bytes {start}-{end - 1}/{result.size}"))
    return Response(206, headers, result.sendable(start, end), head_only=req.method == "HEAD")


def serve(req, delivery, host) -> tuple[Response, str | None]:
    """The answer and whether it came from the cache ("hit") or the origin ("miss"); None for a preflight."""
    if req.method not in ("GET", "HEAD"):
        return _other_method(req, delivery, host)
    try:
        if req.waiting is not None:   # deferred by the loop thread, which found nothing held: go on
            target, coding, shared = req.waiting
            held = None
        else:
            path = content_path(req.raw_path, req.visit.path)
            target = resolve(delivery, host, path, req.query_list, req.client_ip)
            coding = encodings.choose(req.headers.get("Accept-Encoding")) if target.compress else None
            shared = origin_mode.applies(target)
            if not req.inline:
                held = None
            elif shared:
                held = shared_answer.held(req, delivery, target)
            else:
                # a target with no edge check answers what is found: its hits are counted as they are found
                held = held_in_memory(delivery, target, coding, req.visit.now, not target.edge_checked)
            if held is None:
                req.waiting = target, coding, shared
                req.may_wait()   # before the edge checks: a request served again is checked once
        if target.edge_checked:   # else no access list, referer list or rate limit applies
            edge_guard.check(req, target)
        if shared:
            response, cached = (shared_answer.respond_held(req, delivery, held) if held is not None
                                else shared_answer.respond(req, delivery, target))
            if held is not None and _may_give_again(target):
                req.reusable = _reusable(req, target, shared_answer.reusable(held, req.visit.now))
            return (edge_guard.dressed(req, target, response) if target.dressed else response), cached
        result = (fetch_held(delivery, held, req.visit.now, not target.edge_checked) if held is not None
                  else fetch(delivery, target, coding))
    except NotServed as refused:
        raise ApiError(refused.status, refused.code, refused.message, refused.field) from None
    response = object_response(req, result, target)   # the rule's headers are in it (added once per entry)
    if target.rule["cors"]:
        response = edge_guard.dressed(req, target, response, added=True)
    elif held is not None and _may_give_again(target):
        req.reusable = _reusable(req, target, (held, _age_turns(result.entry, req.visit.now)))
    return response, "hit" if result.hit else "miss"


def _may_give_again(target: Target) -> bool:
    """No signed link or CORS decides this target's answers per request (its edge checks run again
    for each answer given again: edge_guard.admission)."""
    return not target.rule["signed"] and not target.rule["cors"]


def _reusable(req, target: Target, found):
    """What public/prepared.py needs to give this memory hit again: its entries, until when it holds,
    and the per-client edge checks to run first (None: none); None when it may not be."""
    if found is None:
        return None
    held, until = found
    return held, until, edge_guard.admission(req.app, target) if target.edge_checked else None


def _age_turns(entry, now: float) -> float:
    """When the Age a hit on `entry` shows at `now` (_headers) next changes."""
    return entry.stored_at + max(0, int(now - entry.stored_at)) + 1


def _other_method(req, delivery, host) -> tuple[Response, str | None]:
    """A CORS preflight on a rule with `cors` is answered here; a rule with methods "all" on an http
    bucket forwards the rest; anywhere else it is 405."""
    try:
        target = resolve(delivery, host, content_path(req.raw_path, req.visit.path), req.query_list, req.client_ip)
    except NotServed:
        target = None
    if target is not None and target.rule["cors"] and edge_guard.is_preflight(req):
        edge_guard.check(req, target)
        return edge_guard.preflight(req, target.rule), None
    if target is None or not origin_mode.forwards(target):
        raise ApiError(405, "method_not_allowed", "only GET and HEAD are served here",
                       headers={"Allow": "GET, HEAD"})
    req.may_wait()
    edge_guard.check(req, target)
    response, cached = shared_answer.forwarded(req, delivery, target)
    return edge_guard.dressed(req, target, response), cached


def answer(req) -> Response:
    """The last stage: serve (an error with the domain's page for it, if any), then count the request
    for its domain."""
    delivery = req.app.delivery
    host = req.visit.host
    known = host in req.app.store.data.get("domains", {})
    try:
        response, cached = serve(req, delivery, host)
    except ApiError as error:
        response, cached = error_pages.answer(req, host, error) or error_response(error), None
        response.refusal = error.code if error.code in REFUSALS else ""
        if response.refusal:
            req.app.metrics.refusals.inc(response.refusal)
    except Exception:
        delivery.traffic.record(host if known else None, 500, 0, None, req.visit.now)
        if known:
            req.app.insight.count(req, host, 500, 0, None)
        raise
    sent = 0 if req.method == "HEAD" or response.status == 304 else response.length or 0
    delivery.traffic.record(host if known else None, response.status, sent, cached, req.visit.now)
    if known:
        req.app.insight.count(req, host, response.status, sent, cached)
    if req.reusable is not None:
        req.app.prepared.offer(req, response, host if known else None, sent, cached)
    return response

