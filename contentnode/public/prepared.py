"""Prepared answers: a memory hit given again from the head the pipeline made for it.

A 10 KB hit held in memory costs the public port most of its Python work in
making the Request, running the seven stages, resolving, deciding headers and
making the head, and all of it repeats byte for byte for the next request of
the same kind. So the content stage offers what it answered from memory
(`offer`) when the answer is a pure function of the request's fields, the
state document, the cache entries it came from and the time; `again` then
answers a later request with the same key from the head the write path made
the first time (http/server.py `Response.head`), while all of these still
hold:

- the key: the listener, method, target and every header field as parsed, in
  order, except X-Forwarded-For (it only names whom a trusted proxy serves:
  the client's address is counted on every request, and the target's
  per-client edge checks run for each answer given again);
- the same state document (a rule, domain or setting change makes a new one);
- each cache entry still the one its key holds in memory, with the same body,
  and fresh (core/cache.py `recount`, which also follows other processes'
  purges, and counts the hits as the pipeline counts them);
- the same second of the Date header and the same Age.

A target with edge checks is offered with them (public/edge_guard.py
`admission`): its access lists and rate limit decide each answer given again
(a token spent only for an answer given), and its referer list, the Referer
being in the key, holds as decided. Targets with CORS or signed links, and
requests with an HTTPS upgrade or ACME challenge to decide, are never
offered; only memory hits answered without a wait are (req.reusable, set by
public/content.py). Anything else, and any request whose key was not offered
or no longer holds, runs the pipeline unchanged, which offers it again. The
traffic series, the insight rows, the metrics and the access line count an
answer given again as the pipeline counts it (the last two in the write
path, as for every answer). Keys and what they hold come from anonymous
clients, so at most MAX_KEPT keys are kept, holding at most MAX_KEPT_BYTES
of keys, heads and bodies (a body evicted from the memory cache stays held
while a key holds it): past either, all are forgotten; a key longer than
MAX_KEY_BYTES is never kept.
"""

import email.utils
import threading
import time

from contentnode.core.cache_memory import HOT_MAX_BYTES
from contentnode.public.acme_challenge import CHALLENGE_PREFIX

MAX_KEPT = 4096
MAX_KEPT_BYTES = HOT_MAX_BYTES   # as much again as the memory cache holds
MAX_KEY_BYTES = 8192
_UNKEYED = "x-forwarded-for"


def request_key(port_name: str, method: str, target: str, headers) -> tuple:
    """What an answer given again must have been asked with; `headers` have lower-case names."""
    if dict.__contains__(headers, _UNKEYED):
        headers = dict(headers)
        del headers[_UNKEYED]
    return port_name, method, target, tuple(dict.items(headers))


class _Kept:
    """One answer given again and what it holds on to."""

    __slots__ = ("response", "held", "doc", "second", "until", "admit", "counted", "answer", "referer", "status",
                 "sent", "cached", "size")

    def __init__(self, response, held, doc, second, until, admit, counted, answer, referer, status, sent, cached,
                 size):
        self.response, self.held, self.doc, self.second, self.until = response, held, doc, second, until
        self.admit = admit   # the per-client edge checks (public/edge_guard.py admission), or None
        self.counted, self.answer, self.referer = counted, answer, referer   # answer: insight.record's, or None
        self.status, self.sent, self.cached, self.size = status, sent, cached, size


class PreparedAnswers:
    """The answers one process gives again (for every public listener: the key names the listener).

    Built by the composition root with what `again` reads and counts: the clock, the store (its
    state document), the memory cache, the traffic counters, the metrics and the insight."""

    def __init__(self, clock, store, cache, traffic, metrics, insight) -> None:
        self._now, self._store, self._recount = clock.now, store, cache.recount
        self._count_traffic, self._count_again, self._insight = traffic.record, metrics.observe_again, insight
        self._kept: dict[tuple, _Kept] = {}
        self._bytes = 0   # what the kept ones hold (a body held by two counted twice)
        self._lock = threading.Lock()   # for changes: readers (again) only look a key up

    def again(self, handler, port_name: str):
        """The Response for a request whose key was offered and still holds, its hits and traffic
        counted; None runs the pipeline."""
        kept = self._kept.get(request_key(port_name, handler.command, handler.path, handler.headers))
        if kept is None:
            return None
        now = self._now()
        if kept.doc is not self._store.data or now >= kept.until or int(time.time()) != kept.second:
            return None
        admit = kept.admit
        if not self._recount(kept.held, now, admit, admit and handler.client_ip):
            return None
        self._count_again()
        self._count_traffic(kept.counted, kept.status, kept.sent, kept.cached, now)
        if kept.answer is not None:
            self._insight.record(now, kept.answer, handler.client_ip, kept.referer)
        return kept.response

    def offer(self, req, response, counted: str | None, sent: int, cached: str) -> None:
        """Offer the answer the pipeline made for `req` (req.reusable: its held cache entries and the
        time its Age changes); kept once the write path has made its head (Response.keep), and only
        if the connection stays open."""
        held, until, admit = req.reusable
        doc = req.visit.doc
        if (not isinstance(response.body, bytes) or req.raw_path.startswith(CHALLENGE_PREFIX)
                or req.scheme == "http" and (doc.get("https") or {}).get("redirect_http")):
            return   # a body not in memory, or a stage that reads more than the state document could answer next
        key = request_key(req.port_name, req.method, req.target, req.headers)
        key_bytes = len(req.target) + sum(len(name) + len(value) for name, value in key[3])
        if key_bytes > MAX_KEY_BYTES:
            return
        referer = req.headers.get("Referer")

        own_date = any(name.lower() == "date" for name, _ in response.headers)   # a stored answer's

        def keep(head: bytes) -> None:
            second = int(time.time())
            if not own_date and email.utils.formatdate(second, usegmt=True).encode("ascii") not in head:
                return   # the second turned while the head was made
            response.keep, response.head = None, head
            size = key_bytes + len(head) + sum(len(body) for _, body in held)
            answer = None if counted is None else (counted, req.method, req.raw_path, response.status, sent, cached)
            made = _Kept(response, held, doc, second, until, admit, counted, answer, referer, response.status, sent,
                         cached, size)
            with self._lock:
                kept = self._kept
                old = kept.pop(key, None)
                if old is not None:
                    self._bytes -= old.size
                if len(kept) >= MAX_KEPT or self._bytes + size > MAX_KEPT_BYTES:
                    kept.clear()
                    self._bytes = 0
                kept[key] = made
                self._bytes += size

        response.keep = keep
