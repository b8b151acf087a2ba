"""A rule's edge controls on the public port: refusals made before any cache or origin work.

The content stage (content.py) resolves the visit to its rule, then asks
`check` before it reads the cache or asks the origin: a client outside the
domain's or the rule's `access` lists (CIDRs, and countries through the process's
country database, core/geoip.py) gets 403 `forbidden_address`; a Referer
the rule's `referers` does not allow gets 403 `forbidden_referer`; one over
the rule's `rate_limit` gets 429 `rate_limited` with Retry-After, the buckets
being the table every public process shares (core/rate_table.py). A rule with
`cors` answers a preflight OPTIONS here (`preflight`), refusing an origin it
does not list with 403 `forbidden_origin`. Each refusal is counted in
contentnode_public_refusals_total by reason (core/metrics.py) and named in
the access line's `refused` field when the answer is made (public/content.py
answer(): a request a listener's loop thread hands to the pool is checked
again there, and counted once).
"""

from contentnode.core import cors, edge_rules, referers
from contentnode.http.errors import ApiError
from contentnode.http.response import Response


def check(req, target) -> None:
    """Refuse the request with an ApiError when the domain or the target's rule does not let this client in now.
    The rule's members are read in the form made once with the rule index (core/edge_rules.py EdgeRule)."""
    context, edge = req.app, target.edge
    if not _address_allowed(_domain_access(context, target), edge, req.client_ip, context.countries):
        raise ApiError(403, "forbidden_address", "this address may not fetch from here")
    if not referers.referer_allowed(target.rule["referers"], req.headers.get("Referer"), target.host):
        raise ApiError(403, "forbidden_referer", "this content may not be fetched from that page")
    limit = edge.rate_limit
    if limit:
        wait = context.delivery.rate_table.take(target.rule_id, edge_rules.client_key(req.client_ip), *limit)
        if wait:
            raise ApiError(429, "rate_limited", "too many requests from this address; try again later",
                           headers={"Retry-After": str(wait)})


def admission(context, target):
    """For an answer public/prepared.py gives again: the checks of `check` that depend on more than
    the request's key, as one call taking the client's address (True: let in, its rate-limit token
    spent), or None when the target has none. The Referer is in the key, so its verdict holds; the
    address and the rate limit are decided for each request. A False lets the pipeline run, which
    refuses and counts the refusal as for any request."""
    domain_access, edge, countries = _domain_access(context, target), target.edge, context.countries
    limit = edge.rate_limit
    if not domain_access and edge.access is None and not limit:
        return None
    # the calls bound once: this runs for every answer given again
    allowed = edge.allows if not domain_access else \
        lambda client_ip, countries: _address_allowed(domain_access, edge, client_ip, countries)
    if not limit:
        return lambda client_ip: allowed(client_ip, countries)
    take, rule_id, client_key = context.delivery.rate_table.take, target.rule_id, edge_rules.client_key
    rate, burst = limit

    def admit(client_ip: str) -> bool:
        return allowed(client_ip, countries) and not take(rule_id, client_key(client_ip), rate, burst)
    return admit


def _domain_access(context, target) -> dict | None:
    domain = context.store.data["domains"].get(target.host)
    return domain and domain["access"]


def _address_allowed(domain_access, edge, client_ip: str, countries) -> bool:
    """The domain's `access` and then the rule's let this address in."""
    return edge_rules.address_allowed(domain_access, client_ip, countries) and edge.allows(client_ip, countries)


def is_preflight(req) -> bool:
    """A CORS preflight (Fetch standard): OPTIONS naming the method the page's script wants to send."""
    return req.method == "OPTIONS" and req.headers.get("Access-Control-Request-Method") is not None


def preflight(req, rule: dict) -> Response:
    """The node's answer to a preflight for a rule with `cors` (after `check`): 204 with the rule's
    lists for an origin it allows, 403 forbidden_origin without any CORS field for another."""
    policy = rule["cors"]
    allowed = cors.allow_origin(policy, req.headers.get("Origin"))
    if allowed is None:
        raise ApiError(403, "forbidden_origin", "this origin may not read from here")
    headers = [("Access-Control-Allow-Origin", allowed), ("Access-Control-Allow-Methods", ", ".join(policy["methods"]))]
    if policy["headers"]:
        headers.append(("Access-Control-Allow-Headers", ", ".join(policy["headers"])))
    if policy["max_age"] is not None:
        headers.append(("Access-Control-Max-Age", str(policy["max_age"])))
    return Response(204, headers + _vary(policy))


def _vary(policy: dict) -> list:
    return [("Vary", "Origin")] if cors.varies(policy) else []


def dressed(req, target, response, added: bool = False):
    """The rule's `headers` added to a content answer, replacing the answer's own of the same names
    (unless `added`: public/content.py adds them where it makes an object's headers, once per cache
    entry for a hit), and its `cors` fields replacing any the origin sent (a new list: a hit's
    headers are shared by the answers of one cache entry)."""
    if not added:
        response.headers = target.edge.added(response.headers)
    policy = target.rule["cors"]
    if policy:   # the rule's CORS decides: an http origin's own Access-Control-* fields go
        allowed = cors.allow_origin(policy, req.headers.get("Origin"))
        fields = [("Access-Control-Allow-Origin", allowed)] if allowed else []
        response.headers = [h for h in response.headers if not h[0].lower().startswith("access-control-")] \
            + fields + _vary(policy)
    return response
