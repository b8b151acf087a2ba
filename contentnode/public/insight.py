"""What one public content request adds to the traffic insight (core/traffic_top.py, traffic_tail.py).

Only requests for the node's own domains are counted. This runs on every
content request, so it only hands the raw values on (two queue appends); the
summaries and the tail make them what may be kept when they fold them (core/
traffic_top.py shaped(): the path without its query string, the client address
as the `client_addresses` setting allows, the referer's host name). The country
comes from the process's country database (core/geoip.py, start-up value
geoip_db: a remembered lookup per address), None without one.
"""


class Insight:
    """Where public content requests are counted for the insight: the two collectors and the
    process's country database, handed in by the composition root."""

    def __init__(self, countries, top, tail):
        self._country_of, self._top, self._tail = countries.country_of, top.record, tail.record

    def count(self, req, host: str, status: int, sent: int, cached: str | None) -> None:
        self.record(req.visit.now, (host, req.method, req.raw_path, status, sent, cached), req.client_ip,
                    req.headers.get("Referer"))

    def record(self, now: float, answer: tuple, client_ip: str, referer: str | None) -> None:
        """The row of one request: `answer` is (host, method, raw_path, status, sent, cached), what an
        answer given again (public/prepared.py) keeps, as it stays the same."""
        row = (int(now), *answer, client_ip, referer, self._country_of(client_ip))
        self._top(row)
        self._tail(row)
