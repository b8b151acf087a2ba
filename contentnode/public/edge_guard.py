"""A rule's edge controls on the public port: refusals made before any cache or origin work.

The content stage (content.py) resolves the visit to its rule, then asks
`check` before it reads the cache or asks the origin: a client outside the
rule's `access` lists (CIDRs, and countries through the process's country database,
core/geoip.py) gets 403 `forbidden_address`; one over the rule's
`rate_limit` gets 429 `rate_limited` with Retry-After, the buckets being the
table every public process shares (core/rate_table.py). Each refusal is counted
in contentnode_public_refusals_total by reason (core/metrics.py) and named
in the access line's `refused` field (the answer carries its code).
"""

from contentnode.core import edge_rules
from contentnode.http.errors import ApiError


def check(req, target) -> None:
    """Refuse the request with an ApiError when the target's rule does not let this client in now."""
    rule = target.rule
    if not edge_rules.address_allowed(rule["access"], req.client_ip, req.app.countries):
        raise refused(req, ApiError(403, "forbidden_address", "this address may not fetch from here"))
    limit = rule["rate_limit"]
    if limit:
        wait = req.app.delivery.rate_table.take(target.rule_id, edge_rules.client_key(req.client_ip),
                                                limit["rate"], limit["burst"])
        if wait:
            raise refused(req, ApiError(429, "rate_limited", "too many requests from this address; try again later",
                                        headers={"Retry-After": str(wait)}))


def dressed(rule: dict, response):
    """The rule's `headers` added to a content answer, replacing the answer's own of the same names
    (a new list: a hit's headers are shared by the answers of one cache entry)."""
    extra = rule["headers"]
    if extra:
        names = {name.lower() for name in extra}
        response.headers = [h for h in response.headers if h[0].lower() not in names] + list(extra.items())
    return response


def refused(req, error: ApiError) -> ApiError:
    req.app.metrics.refusals.inc(error.code)
    return error
