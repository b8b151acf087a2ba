"""Traffic insight (metrics:read): GET /api/traffic/top and GET /api/traffic/tail.

The counting is core/traffic_top.py and core/traffic_tail.py (fed by
public/insight.py); these handlers check the parameters and apply the
`client_addresses` setting as it is now to what was kept.
"""

import re

from contentnode.core import fields as v
from contentnode.core.text import whole_number
from contentnode.core.traffic_top import DIMENSIONS, RANGES
from contentnode.http.errors import invalid
from contentnode.http.router import Route
from contentnode.http.schema import BOOLEAN, STRING, answer, array, integer, nullable, one_of

_STATUS = re.compile(r"[1-5](?:[0-9]{2}|xx)")


def _domain(req, required: bool):
    domain = v.host_query(req.query)
    if domain is None and required:
        raise invalid("domain is required: the host name of one of the node's domains", "domain")
    return domain


def top(req):
    range_name = req.query.get("range", "1h")
    if range_name not in RANGES:
        raise invalid(f"range must be one of {', '.join(RANGES)}", "range")
    by = req.query.get("by", "path")
    if by not in DIMENSIONS:
        raise invalid(f"by must be one of {', '.join(DIMENSIONS)}", "by")
    return req.app.traffic_top.top(_domain(req, True), range_name, by, req.app.traffic_top.client_mode())


def tail(req):
    status = req.query.get("status")
    if status is not None:
        if not _STATUS.fullmatch(status):
            raise invalid("status must be a status code (404) or a class (4xx)", "status")
        status = status[0] if status.endswith("xx") else int(status)
    after = req.query.get("after", "0")
    cursor = whole_number(after)
    if cursor is None:
        raise invalid("after must be the next_after of an earlier answer (a whole number)", "after")
    return req.app.traffic_tail.entries(_domain(req, False), status, cursor, req.app.traffic_top.client_mode())


_COUNT = {"type": "integer", "minimum": 0}
_ROW = answer({"value": STRING, "requests": _COUNT, "bytes": _COUNT})
TOP = answer({"domain": STRING, "range": one_of(*RANGES), "by": one_of(*DIMENSIONS), "approximate": BOOLEAN,
              "top": array(_ROW)})
_ENTRY = answer({"id": _COUNT, "time": STRING, "domain": STRING, "method": STRING, "path": STRING,
                 "status": integer(100, 599), "bytes": _COUNT, "cache": one_of("hit", "miss", "none"),
                 "client": nullable(STRING), "referer": STRING, "country": nullable(STRING)})
TAIL = answer({"requests": array(_ENTRY), "next_after": _COUNT})

ROUTES = [
    Route("GET", "/api/traffic/top", "metrics:read", top, query=frozenset({"domain", "range", "by"}), answer=TOP),
    Route("GET", "/api/traffic/tail", "metrics:read", tail, query=frozenset({"domain", "status", "after"}),
          answer=TAIL),
]
