"""One GET or HEAD through the shared cache: a rule in cache_mode "origin".

The node's disk cache (core/cache.py) keeps the origin's answers: status,
the fields a shared cache may store, the times they were asked for and
received, their freshness lifetime and the Vary names with the request's
values for them. core/http_cache.py decides; this module runs a request
through those decisions: a fresh hit, a revalidation with the stored
validators through the key's one fill (a 304 appends the refreshed fields to
the stored entry, core/cache_refresh.py; no body moves), a stale answer while a
background refresh runs or while the origin fails, a miss filled by one
origin request that every waiter shares when it may. Vary variants live
beside the URL's first answer under keys of their own, so a purge of the URL
(host and path) removes them all.
"""

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field as dataclass_field
from typing import Protocol

from contentnode.core import http_cache as hc
from contentnode.core.cache import Cache
from contentnode.core.cache_entries import Entry
from contentnode.core.cache_fill import OriginAnswer, Result, streamed
from contentnode.core.forwarding import response_fields
from contentnode.core.shared_hit import NOT_SENT, Parsed, parsed

log = logging.getLogger("contentnode.shared_cache")

KEEP_FOR = 31_536_000          # the cache's own ttl cap: an entry's expiry is its retention below
REVALIDATE_KEEP = 86_400       # a stale entry with validators is kept this long for a cheap revalidation
REFRESHES_AT_ONCE = 16         # background (stale-while-revalidate) refreshes running at once, per process
PASS_FOR = 10.0                # seconds a key whose answer was not stored is asked without a fill
PASS_KEYS = 1024               # such keys remembered per process, the oldest forgotten first
# fields sent to the origin by the cache itself (revalidation) or never sent on a fill: the cache
# needs the whole body, and answers the client's conditionals and ranges itself
CLIENT_CONDITIONALS = frozenset({"if-none-match", "if-modified-since", "if-match", "if-unmodified-since",
                                 "if-range", "range"})


class OriginResponse(Protocol):
    status: int
    headers: list
    fields: dict        # the headers by lower-case name, repeats joined (http_cache.fields)
    length: int | None

    def chunks(self): ...

    def close(self) -> None: ...


# forward(extra request fields) -> the origin's answer with its body unread (OriginError when unreachable)
Forward = Callable[[dict], OriginResponse]


@dataclass
class Exchange:
    """What the shared cache answers one request: the origin's status and the fields to send
    (Age and Cache-Status included; each field named once), the body as a cache Result, and
    whether it was a hit."""

    status: int
    headers: list
    result: Result
    hit: bool
    cache_status: str
    memo: Parsed | None = None   # a hit's entry's stored answer, read once per entry (shared_hit.py)
    _by_name: dict | None = dataclass_field(default=None, init=False, repr=False, compare=False)

    def field(self, name: str) -> str | None:
        """The value of the field `name` (lower case) sent, or None; the headers are mapped by
        lower-case name once, at the first question."""
        if self._by_name is None:
            self._by_name = hc.fields(self.headers)
        return self._by_name.get(name)

    def validators(self) -> dict:
        """{"etag", "last_modified"} as the answer sends them (None when it does not)."""
        if self.memo is not None:
            return self.memo.validators
        return {"etag": self.field("etag"), "last_modified": self.field("last-modified")}


class GatewayTimeout(Exception):
    """only-if-cached and nothing usable is stored (RFC 9111 §5.2.1.7): the answer is 504."""


@dataclass(slots=True)
class Request:
    """One request as the shared cache sees it: the cache key of its URL (host and path first),
    its fields (lower-case names), the rule's heuristic cap and stale windows. Made per request
    and never changed (not frozen: a frozen dataclass pays an object.__setattr__ per field)."""

    key: tuple
    fields: Mapping[str, str]
    heuristic_cap: int
    defaults: hc.StaleDefaults


def _stored(entry: Entry) -> dict:
    return dict(entry.meta["fields"])


def _variant_key(key: tuple, names: list, vkey: str | None) -> tuple:
    return key + ("vary\0" + "\0".join(names) + "\0" + (vkey or ""),)


class SharedCache:
    """The shared cache over the node's disk cache; `clock` is the cache's clock."""

    def __init__(self, cache: Cache):
        self.cache = cache
        self._refreshing: set[tuple] = set()
        self._refresh_lock = threading.Lock()
        self._passing: dict[tuple, float] = {}   # key -> until when its misses pass (_pass)
        self._pass_lock = threading.Lock()

    @property
    def clock(self):
        return self.cache.clock

    # ---------------------------------------------------------------- looking up

    def find(self, req: Request, look: Callable[[tuple], Entry | None] | None = None) -> tuple[tuple, Entry | None, str]:
        """(key, entry or None, "uri-miss"|"vary-miss"): where this request's answer is kept
        (`look` finds an entry by key: the cache's peek unless said)."""
        look = look or self.cache.peek
        return self._variant(req, look(req.key), look)

    def _variant(self, req: Request, entry: Entry | None, look: Callable[[tuple], Entry | None]) -> tuple:
        """find() once the URL's first answer (`entry`) is known: the variant a Vary on it selects,
        by the secondary key of only the request fields that Vary names."""
        if entry is None or not entry.meta.get("vary"):
            return req.key, entry, "uri-miss"
        names = entry.meta["vary"]
        vkey = hc.secondary_key(tuple(names), req.fields)
        if vkey is not None and vkey == entry.meta.get("vkey"):
            return req.key, entry, "uri-miss"
        key = _variant_key(req.key, names, vkey)
        return key, (look(key) if vkey is not None else None), "vary-miss"

    def _held_entry(self, key: tuple) -> Entry | None:
        found = self.cache.in_memory(key)
        return found[0] if found is not None else None

    def held(self, req: Request, now: float | None = None) -> Exchange | None:
        """The answer serve() would give at `now` (the cache's clock by default) from a stored answer
        held in memory that needs no origin request (fresh, or stale where the request allows it),
        found without reading a file or counting a hit; None for anything else. The public
        listeners' loop thread answers it without a handoff; its result is uncounted until the
        cache's count_memory_hit."""
        now = self.cache.clock() if now is None else now
        found = self.cache.in_memory(req.key, now)
        entry = found[0] if found is not None else None
        if entry is not None and entry.meta.get("vary"):
            _key, entry, _miss = self._variant(req, entry, self._held_entry)
        body = entry.body if entry is not None else None
        if entry is None or body is None:
            return None
        memo = parsed(entry)
        age = memo.age(now)
        decision = hc.reuse(memo.fields, entry.meta["lifetime"], age, req.fields, req.defaults, memo.directives)
        if decision.action not in ("fresh", "stale"):
            return None
        detail = None if decision.action == "fresh" else decision.action
        return self._exchange(self.cache.held_result(entry, body), True,
                              hc.cache_status(hit=True, ttl=decision.ttl, detail=detail), age, memo)

    def state(self, req: Request) -> dict:
        """The cache decision for probe and diagnose: stored or not, its status, where its freshness
        comes from, the freshness left (`expires_in`, negative when stale), validators, Vary."""
        _key, entry, _kind = self.find(req)
        if entry is None:
            return {"cached": False, "age": None, "size": None, "expires_in": None, "mode": "origin"}
        meta = entry.meta
        fields = _stored(entry)
        age = hc.current_age(fields, meta["request_time"], meta["response_time"], self.clock())
        return {"cached": True, "age": int(age), "size": entry.size, "expires_in": int(meta["lifetime"] - age),
                "mode": "origin", "status": meta["status"], "freshness": meta["source"],
                "lifetime": int(meta["lifetime"]), "etag": fields.get("etag"),
                "last_modified": fields.get("last-modified"), "vary": meta.get("vary") or []}

    def predict(self, req: Request) -> str:
        """The Cache-Status a GET with this request's fields would get now (probe shows it)."""
        _key, entry, miss = self.find(req)
        if entry is None:
            return hc.cache_status(fwd=miss)
        fields = _stored(entry)
        age = hc.current_age(fields, entry.meta["request_time"], entry.meta["response_time"], self.clock())
        decision = hc.reuse(fields, entry.meta["lifetime"], age, req.fields, req.defaults)
        if decision.action in ("fresh", "stale", "stale-while-revalidate"):
            return hc.cache_status(hit=True, ttl=decision.ttl,
                                   detail=None if decision.action == "fresh" else decision.action)
        return hc.cache_status(fwd=decision.fwd or "stale", ttl=decision.ttl)

    # ---------------------------------------------------------------- serving

    def serve(self, req: Request, forward: Forward) -> Exchange:
        """The answer to one GET (HEAD is served as a GET without its body) through the cache."""
        key, entry, miss = self.find(req)
        if entry is None:
            if "only-if-cached" in hc.directives(req.fields.get("cache-control")):
                raise GatewayTimeout()
            if self._passes(key):
                return self._pass(req, key, forward, miss)
            return self._fill(req, key, forward, None, miss)
        memo, age, decision = self._reuse(req, entry)
        if decision.action == "stale-while-revalidate":
            newer = self.cache.reread(entry)   # another process may have refreshed it already
            if newer is not None:
                entry = newer
                memo, age, decision = self._reuse(req, entry)
        if decision.action in ("fresh", "stale", "stale-while-revalidate"):
            result = self.cache.lookup(key)
            if result is not None and result.entry is not None and result.entry.version == entry.version:
                if decision.action == "stale-while-revalidate":
                    self._refresh_later(req, key, entry, forward)
                detail = None if decision.action == "fresh" else decision.action
                return self._exchange(result, True, hc.cache_status(hit=True, ttl=decision.ttl, detail=detail), age,
                                      memo)
            if result is not None:
                result.close()
            return self._fill(req, key, forward, None, miss)
        if decision.action == "gateway-timeout":
            raise GatewayTimeout()
        return self._fill(req, key, forward, entry, decision.fwd or "stale")

    def _reuse(self, req: Request, entry: Entry) -> tuple[Parsed, float, hc.Reuse]:
        """(the entry's parsed answer, its age, whether and how it may answer this request)."""
        memo = parsed(entry)
        age = memo.age(self.clock())
        return memo, age, hc.reuse(memo.fields, entry.meta["lifetime"], age, req.fields, req.defaults, memo.directives)

    def _exchange(self, result: Result, hit: bool, status_field: str, age: float | None = None,
                  memo: Parsed | None = None) -> Exchange:
        """The answer's exchange: a hit sends its entry's stored head (parsed once, shared_hit.py;
        `memo` when the caller has its entry's already)."""
        meta = result.meta
        if memo is None and hit and result.entry is not None:
            memo = parsed(result.entry)
        if memo is not None:
            head = memo.head
        else:
            fields = meta["fields"] if not hit else list(hc.unvalidated_fields(dict(meta["fields"])).items())
            head = response_fields(fields, NOT_SENT)
        if age is None:
            age = hc.current_age(dict(meta["fields"]), meta["request_time"], meta["response_time"], self.clock())
        headers = head + [("age", str(int(age))), ("cache-status", status_field),
                          ("x-cache", "HIT" if hit else "MISS")]
        return Exchange(meta["status"], headers, result, hit, status_field, memo)

    def _fill(self, req: Request, key: tuple, forward: Forward, stale: Entry | None, fwd: str) -> Exchange:
        """Ask the origin through the key's one fill (a revalidation when `stale` is given); a
        waiter whose Vary values differ from the answer's goes on under its variant's key."""
        usable = (lambda e: e.version != stale.version) if stale is not None else None
        try:
            result = self.cache.get(key, self._fetcher(req, forward, stale), KEEP_FOR, usable)
        except Exception:
            fallback = self._stale_if_error(req, key, stale, None)
            if fallback is None:
                raise
            return fallback
        meta = result.meta
        if meta.get("vary") and key == req.key:
            vkey = hc.secondary_key(tuple(meta["vary"]), req.fields)
            if vkey != meta.get("vkey"):
                result.close()
                if vkey is None:       # Vary: * is never served from the cache: this request's own answer
                    return self._own(req, forward)
                return self._fill(req, _variant_key(key, meta["vary"], vkey), forward, None, "vary-miss")
        if meta["status"] >= 500 and stale is not None:
            fallback = self._stale_if_error(req, key, stale, meta["status"])
            if fallback is not None:
                result.close()
                return fallback
        age = hc.current_age(dict(meta["fields"]), meta["request_time"], meta["response_time"], self.clock())
        ttl = meta["lifetime"] - age if meta.get("stored") else None
        if not result.hit:
            self._note(key, passing=not meta.get("stored"))
        if result.hit and not result.refreshed:
            return self._exchange(result, True, hc.cache_status(hit=True, ttl=ttl), age)
        return self._exchange(result, False, hc.cache_status(
            fwd=meta.get("fwd") or fwd, fwd_status=meta["origin_status"], stored=bool(meta.get("stored")), ttl=ttl,
            detail=meta.get("why")), age)

    def _own(self, req: Request, forward: Forward, fwd: str = "uri-miss") -> Exchange:
        """This request's own answer, neither stored nor shared."""
        answer = self._fetcher(req, forward, None, store=False)()
        result = streamed(answer)
        return self._exchange(result, False, hc.cache_status(fwd=fwd, fwd_status=answer.meta["origin_status"],
                                                             detail=answer.meta.get("why")))

    # ---------------------------------------------------------------- keys whose answers are not stored

    def _passes(self, key: tuple) -> bool:
        with self._pass_lock:
            until = self._passing.get(key)
        return until is not None and until > self.clock()

    def _note(self, key: tuple, passing: bool) -> None:
        """Remember (for PASS_FOR seconds) or forget that the key's last answer was not stored."""
        with self._pass_lock:
            self._passing.pop(key, None)
            if passing:
                self._passing[key] = self.clock() + PASS_FOR
                if len(self._passing) > PASS_KEYS:
                    del self._passing[next(iter(self._passing))]

    def _pass(self, req: Request, key: tuple, forward: Forward, fwd: str) -> Exchange:
        """A miss on a key whose last answer was not stored (no-store, private...): asked on its
        own, like a Vary: * answer, without starting or joining the key's fill, so it neither
        waits for another request's answer it could not share nor pays for a fill (temp file,
        key lock, a thread's wake-up). An answer that may be stored now goes to this request
        uncached, and the key's next miss fills the cache again."""
        exchange = self._own(req, forward, fwd)
        self._note(key, passing=exchange.result.meta.get("why") is not None)
        return exchange

    def _stale_if_error(self, req: Request, key: tuple, stale: Entry | None, status: int | None) -> Exchange | None:
        """The stale entry in place of a failed origin, when stale-if-error allows (RFC 5861 §4)."""
        if stale is None:
            return None
        fields = _stored(stale)
        age = hc.current_age(fields, stale.meta["request_time"], stale.meta["response_time"], self.clock())
        ttl = stale.meta["lifetime"] - age
        if not hc.stale_if_error(fields, ttl, req.fields, req.defaults):
            return None
        result = self.cache.lookup(key)
        if result is None:
            return None
        return self._exchange(result, True, hc.cache_status(fwd="stale", fwd_status=status, ttl=ttl,
                                                            detail="stale-if-error"), age)

    def _refresh_later(self, req: Request, key: tuple, entry: Entry, forward: Forward) -> None:
        """Revalidate `entry` in the background (stale-while-revalidate), once per key at a time."""
        with self._refresh_lock:
            if key in self._refreshing or len(self._refreshing) >= REFRESHES_AT_ONCE:
                return
            self._refreshing.add(key)

        def run():
            try:
                result = self.cache.get(key, self._fetcher(req, forward, entry), KEEP_FOR,
                                        lambda e: e.version != entry.version)
                if result.hit:
                    result.close()   # refreshed in place (or by another request): nothing to read
                else:
                    result.read_all()
            except Exception as exc:  # noqa: BLE001 - a failed refresh leaves the stale entry; the next request retries
                log.info("background refresh failed: %s", exc)
            finally:
                with self._refresh_lock:
                    self._refreshing.discard(key)
        threading.Thread(target=run, name="cache-refresh", daemon=True).start()

    # ---------------------------------------------------------------- the origin request

    def _fetcher(self, req: Request, forward: Forward, stale: Entry | None, store: bool = True):
        """The fill's fetch: one origin request; a 304 to a revalidation refreshes the stored head."""
        clock = self.clock

        def fetch() -> OriginAnswer:
            extra = hc.conditional_fields(_stored(stale)) if stale is not None else {}
            request_time = clock()
            response = forward(extra)
            response_time = clock()
            fields = response.fields
            if response.status == 304 and stale is not None and hc.refreshable(_stored(stale), fields):
                response.close()
                return self._refreshed(stale, fields, request_time, response_time)
            if response.status == 304:
                response.close()
                response = forward({})
                fields = response.fields
            return self._answer(req, response, fields, request_time, response_time, store)
        return fetch

    def _refreshed(self, stale: Entry, fields: dict, request_time: float, response_time: float) -> OriginAnswer:
        """The stored answer under the fields a 304 refreshed (RFC 9111 §3.2, §4.3.4): the fill
        appends them to the stored entry, whose body stays where it is."""
        merged = hc.refreshed_fields(_stored(stale), fields)
        lifetime = hc.freshness_lifetime(stale.meta["status"], merged, response_time,
                                         stale.meta.get("heuristic_cap", 0))
        meta = dict(stale.meta, fields=list(merged.items()), request_time=request_time,
                    response_time=response_time, lifetime=lifetime.lifetime, source=lifetime.source,
                    origin_status=304, fwd="stale")
        return OriginAnswer(200, meta, stale.size, at_hand=True, refresh_of=stale,
                            expires_at=response_time + _retention(merged, lifetime.lifetime, stale.meta["defaults"]))

    def _answer(self, req: Request, response, fields: dict, request_time: float, response_time: float,
                store: bool) -> OriginAnswer:
        why, lifetime, keep = verdict(req, response.status, fields, response_time)
        names = list(hc.vary_names(fields))
        shared = store and why is None
        kept = hc.stored_fields(fields) if shared else {k: v for k, v in fields.items() if k not in hc.HOP_BY_HOP}
        meta = {"status": response.status, "origin_status": response.status, "fields": list(kept.items()),
                "request_time": request_time, "response_time": response_time, "lifetime": lifetime.lifetime,
                "source": lifetime.source, "vary": names if names != ["*"] else [],
                "vkey": hc.secondary_key(tuple(names), req.fields), "heuristic_cap": req.heuristic_cap,
                "defaults": [req.defaults.while_revalidate, req.defaults.if_error], "stored": shared, "why": why,
                "etag": fields.get("etag"), "last_modified": fields.get("last-modified"),
                "content_type": fields.get("content-type")}
        if names == ["*"]:
            meta["vary"] = ["*"]
        # an answer passed through that came with its head is sent from memory in one write, its
        # origin connection given back before the client is written to
        body = None if shared else response.held_body()
        return OriginAnswer(200, meta, response.length, response.chunks() if body is None else (body,),
                            response.close, expires_at=response_time + keep, shared=shared, body=body)


def verdict(req: Request, status: int, fields: Mapping[str, str], response_time: float):
    """(why it is not stored or None, its freshness, how long it is kept) for an origin's answer."""
    cc = hc.response_directives(fields)   # read once for the three
    decision = hc.storable("GET", status, req.fields, fields, cc)
    lifetime = hc.freshness_lifetime(status, fields, response_time, req.heuristic_cap, cc)
    keep = _retention(fields, lifetime.lifetime, [req.defaults.while_revalidate, req.defaults.if_error], cc)
    why = decision.reason if not decision.ok else None
    if decision.ok and keep <= 0:
        why = "no freshness and no validators"
    return why, lifetime, keep


def _retention(fields: Mapping[str, str], lifetime: float, defaults, cc: Mapping[str, str | None] | None = None) -> float:
    """How long an entry is kept: its freshness, then as long as it may still serve stale or be
    revalidated cheaply (its validators). `cc`: the fields' response_directives, when at hand."""
    cc = hc.response_directives(fields) if cc is None else cc
    windows = [hc.delta_seconds(cc.get(name)) or 0 for name in ("stale-while-revalidate", "stale-if-error")]
    validators = "etag" in fields or "last-modified" in fields
    return lifetime + max(windows + list(defaults) + [REVALIDATE_KEEP if validators else 0])
