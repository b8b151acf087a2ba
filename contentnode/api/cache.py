"""GET /api/cache: the cache's books as every process shares them (the panel's Cache page).

What core/cache_ledger.py keeps: entries and bytes on disk whoever stored
them, the cap, the fills in flight in the daemon, each process's hits and
misses since it started, and the last purge. Purge and warm are in
api/delivery.py.
"""

from contentnode import clock
from contentnode.http.router import Route
from contentnode.http.schema import answer

_COUNT = {"type": "integer", "minimum": 0}
_PROCESS = answer({"slot": _COUNT, "pid": _COUNT, "role": {"type": "string", "enum": ["daemon", "worker"]},
                   "alive": {"type": "boolean"}, "hits": _COUNT, "misses": _COUNT,
                   "hit_ratio": {"type": ["number", "null"]}})
CACHE_ANSWER = answer({
    "entries": _COUNT, "bytes": _COUNT, "max_bytes": _COUNT, "filling": _COUNT,
    "processes": {"type": "array", "items": _PROCESS},
    "last_purge": {"type": ["object", "null"], "properties": {"at": {"type": "string"}, "purged": _COUNT}},
})


def cache_books(req):
    books = req.app.delivery.cache.books()
    for process in books["processes"]:
        process["role"] = "daemon" if process["slot"] == 0 else "worker"
    if books["last_purge"] is not None:
        books["last_purge"]["at"] = clock.rfc3339(books["last_purge"]["at"])
    return books


ROUTES = [Route("GET", "/api/cache", "routes:read", cache_books, answer=CACHE_ANSWER)]
