"""The HTTP answers of services/origin_mode.py: a rule in cache_mode "origin" (the origin's status
and fields as the shared cache answers them, the client's conditionals and ranges on a 200), and
another method forwarded by a rule with methods "all"."""

import threading

from contentnode.core import http_cache as hc
from contentnode.core.bodies import StreamBody
from contentnode.core.forwarding import response_fields
from contentnode.core.cache_fill import FillStalled, FillTruncated
from contentnode.core.origin import OriginError
from contentnode.core.shared_cache import GatewayTimeout
from contentnode.core.shared_hit import parsed
from contentnode.http.errors import ApiError
from contentnode.http.response import Response
from contentnode.public import content
from contentnode.services import origin_mode
from contentnode.services.delivery import origin_error

# representation metadata a 304 leaves out (RFC 9110 15.4.5)
_NOT_IN_304 = frozenset({"content-type", "content-encoding", "content-language", "accept-ranges"})


def visitor(req) -> origin_mode.Visitor:
    """The request as the origin mode reads it; the peer is a trusted proxy when the node took
    the client's address from its X-Forwarded-For."""
    return origin_mode.Visitor(req.method, list(req.headers.items()), req.query_list, req.peer_ip,
                               req.client_ip != req.peer_ip, req.scheme, req.headers.get("Host") or "")


def held(req, delivery, target):
    """What respond() would answer from memory without a wait (origin_mode.held), or None; only
    looked at: respond_held() answers it. A hit reads only the request's fields (already one value
    per lower-case name) and query: no Visitor is built for it."""
    return origin_mode.held(delivery, target, dict(req.headers), req.query_list, req.visit.now)


def reusable(found, now: float) -> tuple[list, float] | None:
    """What public/prepared.py needs to give a hit held() found at `now` again (the entries with their
    bodies, and until when its Age and freshness stay), or None for an entry chosen by a Vary (the
    request fields it varies on are not all in a prepared answer's key)."""
    entries = found[1]
    stored = entries[0]   # the stored answer (then, compressed, its variant)
    if stored.meta.get("vary"):
        return None
    return [(entry, entry.body) for entry in entries], parsed(stored).steady_until(stored.meta["lifetime"], now)


def respond_held(req, delivery, found) -> tuple[Response, str]:
    """The answer to a request held() found, its hits counted: always a hit."""
    exchange, entries = found
    origin_mode.count_held(delivery, entries)
    return _answer(req, exchange)


def respond(req, delivery, target) -> tuple[Response, str]:
    """The answer and "hit" or "miss"."""
    try:
        exchange = origin_mode.exchange(delivery, target, visitor(req), _interim_to(req))
    except GatewayTimeout:
        raise ApiError(504, "gateway_timeout", "nothing stored answers this only-if-cached request") from None
    except (OriginError, FillStalled, FillTruncated, OSError) as exc:
        refused = origin_error(exc)
        raise ApiError(refused.status, refused.code, refused.message) from None
    return _answer(req, exchange)


def _interim_to(req):
    """Where the origin's interim answers for this request go: to its client as they come, their
    fields passed back as the final answer's are (core/forwarding.py). Only from this thread, which
    writes the final answer after them: a revalidation in the background, whose request may be
    answered already, passes nothing on."""
    thread = threading.get_ident()

    def pass_on(status: int, fields: list) -> None:
        if threading.get_ident() == thread:
            req.pass_on_interim(status, response_fields(fields))
    return pass_on


def _answer(req, exchange) -> tuple[Response, str]:
    """The client's answer to the shared cache's exchange: its conditionals and range on a 200."""
    result, headers, head = exchange.result, exchange.headers, req.method == "HEAD"
    cached = "hit" if exchange.hit else "miss"
    if result.size is None:   # the origin announced no length: streamed as it comes
        return Response(exchange.status, headers, StreamBody(result.chunks(), None, result.close), head), cached
    if exchange.status != 200:
        return Response(exchange.status, headers, result.sendable(0, result.size), head_only=head), cached
    meta = exchange.validators()
    try:
        if content.not_modified(req.headers, meta):
            result.close()
            return Response(304, [h for h in headers if h[0].lower() not in _NOT_IN_304]), cached
        span = content.byte_range(req.headers, result.size, meta)
    except ApiError:
        result.close()
        raise
    if span is None:
        return Response(200, headers, result.sendable(0, result.size), head_only=head), cached
    start, end = span
    headers = headers + [("Content-Range", f"bytes {start}-{end - 1}/{result.size}")]
    return Response(206, headers, result.sendable(start, end), head_only=head), cached


def forwarded(req, delivery, target) -> tuple[Response, str]:
    """Another method passed on to the origin, its body streamed both ways; 413 past max_body."""
    length = req.content_length if not req.chunked else None
    try:
        answer = origin_mode.forward(delivery, target, visitor(req), req.body_chunks(), length, _interim_to(req))
    except origin_mode.TooLarge:
        raise ApiError(413, "payload_too_large",
                       f"the body is larger than this path accepts ({target.rule['max_body']} bytes)") from None
    except OriginError as exc:
        if isinstance(exc.__cause__ or exc.__context__, origin_mode.TooLarge):
            raise ApiError(413, "payload_too_large",
                           f"the body is larger than this path accepts ({target.rule['max_body']} bytes)") from None
        refused = origin_error(exc)
        raise ApiError(refused.status, refused.code, refused.message) from None
    headers = response_fields(answer.headers) + [
        ("Cache-Status", hc.cache_status(fwd="method", fwd_status=answer.status))]
    body = StreamBody(answer.chunks(), answer.length, answer.close)
    return Response(answer.status, headers, body, head_only=req.method == "HEAD"), "miss"
