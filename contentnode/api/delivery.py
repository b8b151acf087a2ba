"""Content delivery endpoints (purge, warm, probe, diagnose, traffic metrics).

The App builds the content engine's Delivery (services/delivery.py: cache,
traffic series, origins, and its flush job) and adds its Prometheus counters
here (port="public", one bounded domain label).
"""

import time
from urllib.parse import parse_qsl, urlsplit

from contentnode import clock
from contentnode.core import fields as v
from contentnode.core import dns
from contentnode.core.certs import covers
from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.core.origin import OriginError
from contentnode.core.steps import Steps, elapsed_ms
from contentnode.core.text import one_line
from contentnode.core.traffic import COUNTERS, RANGES
from contentnode.http.errors import ApiError, invalid
from contentnode.http.router import Route
from contentnode.http.schema import answer, array, obj, one_of, text
from contentnode.services import delivery as content
from contentnode.services import origin_mode
from contentnode.services.delivery import NotServed

WARM_MAX_URLS = 100
WARM_WORKERS = 4
PURGE_MAX_URLS = 1000


def register_metrics(metrics, delivery) -> None:
    metrics.watch_traffic(delivery.traffic)
    cache = delivery.cache
    metrics.registry.gauge("contentnode_cache_bytes", "Bytes held by the content cache",
                           lambda: cache.stats()["bytes"])
    metrics.registry.gauge("contentnode_cache_entries", "Entries in the content cache",
                           lambda: cache.stats()["entries"])


# ---------------------------------------------------------------- URLs in bodies


def parse_url(value, field: str):
    """(scheme, host, decoded path, query pairs) of an http(s) URL given in a body."""
    if not isinstance(value, str) or not value.strip() or len(value) > 4096 or not one_line(value):
        raise invalid(f"{field} must be an http or https URL on one line", field)
    try:
        parts = urlsplit(value.strip())
        host = normalize_host(parts.hostname or "")
    except (ValueError, HostnameError):
        raise invalid(f"{field}: {value[:200]!r} is not a valid http or https URL", field) from None
    if parts.scheme not in ("http", "https"):
        raise invalid(f"{field} must be an http or https URL", field)
    try:
        path = content.clean_path(parts.path or "/")
    except NotServed as exc:
        raise invalid(f"{field}: {exc.message}", field) from None
    return parts.scheme, host, path, parse_qsl(parts.query, keep_blank_values=True)


def known_domain(doc: dict, host: str, field: str) -> dict:
    """The domain record for host; 404 when the node does not serve it, so a typo is never a silent no-op."""
    record = doc["domains"].get(host)
    if record is None:
        raise ApiError(404, "not_found", f"{host} is not a domain of this node", field)
    return record


# ---------------------------------------------------------------- purge and warm


def purge(req):
    body = req.body
    forms = [name for name in ("urls", "domain", "all") if name in body]
    if len(forms) != 1 or ("prefix" in body) != (forms == ["domain"]):
        raise invalid('give exactly one of {"urls"}, {"domain","prefix"} or {"all": true}')
    cache = req.app.delivery.cache
    if forms == ["all"]:
        purged, detail = cache.purge_all(), {"all": True}
    elif forms == ["urls"]:
        urls = v.string_list(body, "urls", required=True, max_items=PURGE_MAX_URLS, max_len=4096)
        targets = {parse_url(url, "urls")[1:3] for url in urls}
        for host, _ in targets:
            known_domain(req.app.store.data, host, "urls")
        purged = cache.purge_urls(targets)  # one walk of the cache folder
        detail = {"urls": len(urls)}
    else:
        try:
            host = normalize_host(body["domain"])
        except HostnameError as exc:
            raise invalid(f"domain: {exc}", "domain") from None
        prefix = v.text(body, "prefix", max_len=1024, strip=False)
        if not prefix.startswith("/"):
            raise invalid('prefix must start with "/"', "prefix")
        prefix = content.canonical_slashes(prefix)   # as request paths are, so "//static/" covers them
        known_domain(req.app.store.data, host, "domain")
        purged, detail = cache.purge_prefix(host, prefix), {"domain": host, "prefix": prefix}
    req.audit("cache.purge", detail=dict(detail, purged=purged))
    return {"purged": purged}


def _warm_one(delivery, url: str, parsed) -> dict:
    started = time.monotonic()
    _, host, path, query = parsed
    try:
        target = content.resolve(delivery, host, path, query, None, check_signature=False)
        if origin_mode.applies(target):
            return _warm_shared(delivery, url, parsed, target, started)
        result = content.fetch(delivery, target)
    except NotServed as exc:
        return {"url": url, "ok": False, "status": exc.status, "bytes": 0, "ms": elapsed_ms(started),
                "error": ApiError(exc.status, exc.code, exc.message, exc.field).body()["error"]}
    try:
        if not result.hit:
            for _ in result.chunks():
                pass
            result.wait_stored()
    except Exception as exc:  # a failed fill: the origin's cause stays in the log
        return {"url": url, "ok": False, "status": content.origin_error(exc).status, "bytes": 0,
                "ms": elapsed_ms(started)}
    finally:
        result.close()
    return {"url": url, "ok": True, "status": 200, "bytes": result.size, "ms": elapsed_ms(started),
            "cache": "hit" if result.hit else "miss"}


def _warm_shared(delivery, url: str, parsed, target, started) -> dict:
    """Warm a URL of a rule in cache_mode "origin": one GET through the shared cache, as a client
    without request fields would ask (the origin decides whether it is stored)."""
    scheme, host, _, query = parsed
    visitor = origin_mode.Visitor("GET", [("Host", host)], query, "127.0.0.1", False, scheme, host)
    try:
        exchange = origin_mode.exchange(delivery, target, visitor)
        size = len(exchange.result.read_all())
    except Exception as exc:  # the origin's cause stays in the log
        return {"url": url, "ok": False, "status": content.origin_error(exc).status, "bytes": 0,
                "ms": elapsed_ms(started)}
    return {"url": url, "ok": 200 <= exchange.status < 300, "status": exchange.status, "bytes": size,
            "ms": elapsed_ms(started), "cache": "hit" if exchange.hit else "miss",
            "cache_status": exchange.field("cache-status")}


def warm(req):
    from concurrent.futures import ThreadPoolExecutor   # here, not at every start: only a warm uses a pool

    body = req.body
    urls = v.string_list(body, "urls", required=True, max_items=WARM_MAX_URLS, max_len=4096)
    parsed = [parse_url(url, "urls") for url in urls]
    for _, host, _, _ in parsed:
        known_domain(req.app.store.data, host, "urls")
    with ThreadPoolExecutor(max_workers=WARM_WORKERS, thread_name_prefix="warm") as pool:
        results = list(pool.map(lambda pair: _warm_one(req.app.delivery, *pair), zip(urls, parsed)))
    req.audit("cache.warm", detail={"urls": len(urls), "ok": sum(r["ok"] for r in results)})
    return {"results": results}


# ---------------------------------------------------------------- probe and diagnose


def _origin(delivery, target) -> dict:
    started = time.monotonic()
    if target.bucket is None:
        return {"ok": False, "status": None, "error": "the rule's bucket no longer exists",
                "ms": elapsed_ms(started)}
    try:
        info = delivery.origin(target).head(target.key, client_host=target.host)
    except OriginError as exc:
        return {"ok": False, "status": exc.status, "error": exc.message, "code": exc.code,
                "ms": elapsed_ms(started)}
    return {"ok": True, **info, "ms": elapsed_ms(started)}


def _rule_view(rule_id, rule) -> dict:
    return {"id": rule_id, "path": rule["path"], "enabled": rule["enabled"],
            "signed": rule["signed"], "images": rule["images"], "cache_ttl": rule["cache_ttl"]}


def probe(req):
    body = req.body
    _, host, path, query = parse_url(body.get("url"), "url")
    doc, delivery = req.app.store.data, req.app.delivery
    domain = known_domain(doc, host, "url")
    answer = {"url": body["url"], "host": host, "path": path, "domain": {"host": host, "status": domain["status"]},
              "redirect": domain["redirect"], "rule": None, "bucket": None, "key": None,
              "signature_required": None, "origin": None, "cache": None}
    trace = Steps()
    try:
        target = content.resolve(delivery, host, path, query, None, check_signature=False, trace=trace)
    except NotServed as exc:
        target, failure = None, {"ok": False, "status": exc.status, "error": exc.message}
    rule_step = next((step for step in trace.items if "rule_id" in step), None)   # a disabled rule too
    if rule_step is None:
        return answer
    rule = doc["rules"][rule_step["rule_id"]]
    bucket = doc.get("buckets", {}).get(rule["bucket"])
    answer.update(rule=_rule_view(rule_step["rule_id"], rule), key=rule_step["key"],
                  signature_required=rule["signed"],
                  bucket={"id": rule["bucket"], "name": bucket["name"] if bucket else None})
    if target is None:
        answer["origin"] = failure
        return answer
    answer["origin"] = origin = _origin(delivery, target)
    fields = origin.pop("fields", None)   # an http origin's answer fields: only the decision reads them
    answer["cache"] = (origin_mode.probe_state(delivery, target, query, origin.get("status"), fields)
                       if origin_mode.applies(target) else delivery.cache.state(target.cache_key))
    return answer


def _dns_step(steps, host, dns_server):
    started = time.monotonic()
    try:
        found = dns.resolve(host, dns_server)
    except dns.ResolveError as exc:
        return steps.add("dns", False, str(exc), started)
    addresses = found["A"] + found["AAAA"]
    detail = f"{host} resolves to {', '.join(addresses)}" if addresses else f"{host} does not resolve"
    return steps.add("dns", addresses, detail, started)


def _tls_step(steps, app, host):
    started = time.monotonic()
    leaf = app.tls.certs.leaf(host)
    if leaf is None:
        return steps.add("tls", False, f"no certificate is installed for {host}", started)
    now = app.clock.now()
    if not covers(leaf, host):
        return steps.add("tls", False, f"the installed certificate does not cover {host}", started)
    if not leaf.not_valid_before_utc.timestamp() <= now < leaf.not_valid_after_utc.timestamp():
        return steps.add("tls", False, "the installed certificate is expired or not yet valid", started)
    return steps.add("tls", True, f"certificate valid until {clock.rfc3339(leaf.not_valid_after_utc.timestamp())}",
                     started)


def diagnose(req):
    """The steps of a visit to a URL, in a visitor's order.

    Outside the node (parse, DNS), its pipeline (redirect, TLS, then the content
    stage's own resolve, traced), the origin and the cache.
    """
    body = req.body
    url = body.get("url")
    steps = Steps()
    started = time.monotonic()
    if not isinstance(url, str) or not url.strip():
        raise invalid("url must be an http or https URL", "url")
    try:
        scheme, host, path, query = parse_url(url, "url")
    except ApiError as exc:
        steps.add("parse", False, exc.message, started)
        return steps.report()
    doc, delivery = req.app.store.data, req.app.delivery
    domain = known_domain(doc, host, "url")
    steps.add("parse", True, f"{scheme} request for {path} on {host}", started)
    _dns_step(steps, host, req.app.outbound().dns_server)
    started = time.monotonic()
    split = urlsplit(url.strip())
    redirect = content.redirect_location(domain, split.path + (f"?{split.query}" if split.query else ""))
    if redirect:
        steps.add("redirect", True, f"answered with a {redirect[0]} redirect to {redirect[1]}", started)
        return steps.report()
    steps.add("redirect", True, "no redirect", started)
    if scheme == "https":
        _tls_step(steps, req.app, host)
    try:
        target = content.resolve(delivery, host, path, query, None, trace=steps)
    except NotServed:
        return steps.report()   # the step that refused the visit is the last one
    origin = _origin(delivery, target)
    detail = (f"{origin['status']}, {origin['size']} bytes, {origin['content_type']}" if origin["ok"]
              else f"the origin failed: {origin['error']}")
    steps.items.append({"name": "origin", "ok": origin["ok"], "detail": detail, "ms": origin["ms"]})
    started = time.monotonic()
    if origin_mode.applies(target):
        steps.add("cache", True, origin_mode.describe(origin_mode.cache_state(delivery, target, query)), started)
        return steps.report()
    state = delivery.cache.state(target.cache_key)
    steps.add("cache", True, f"cached {state['age']} s ago, {state['size']} bytes" if state["cached"]
              else "not cached: the next request fetches from the origin", started)
    return steps.report()


# ---------------------------------------------------------------- metrics


def metrics(req):
    name = req.query.get("range")
    if name not in RANGES:
        raise invalid(f"range must be one of {', '.join(RANGES)}", "range")
    domain = v.host_query(req.query)
    answer = req.app.delivery.traffic.points(name, domain)
    if domain is not None:
        answer["domain"] = domain
    return answer


def _panel_metrics(req):
    points = req.app.delivery.traffic.points("24h")["points"]
    return {"last_24h": {name: sum(p[name] for p in points) for name in COUNTERS},
            "cache": req.app.delivery.cache.stats()}


PANEL_SECTIONS = [("metrics", "metrics:read", _panel_metrics)]

_URL = text(4096)
URL_BODY = obj({"url": _URL}, required=["url"])
WARM_BODY = obj({"urls": array(_URL, WARM_MAX_URLS, min_items=1)}, required=["urls"])
PURGE_BODY = obj({"urls": array(_URL, PURGE_MAX_URLS, min_items=1), "domain": text(253), "prefix": text(1024),
                  "all": one_of(True)},
                 description='exactly one of {"urls"}, {"domain", "prefix"} or {"all": true}')

ROUTES = [
    Route("POST", "/api/purge", "routes:write", purge, body=PURGE_BODY,
          answer=answer({"purged": {"type": "integer", "minimum": 0}})),
    Route("POST", "/api/warm", "routes:write", warm, body=WARM_BODY),
    Route("POST", "/api/probe", "routes:read", probe, body=URL_BODY),
    Route("POST", "/api/diagnose", "routes:read", diagnose, body=URL_BODY),
    Route("GET", "/api/metrics", "metrics:read", metrics, query=frozenset({"range", "domain"})),
]
