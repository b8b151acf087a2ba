"""A minimal Prometheus registry (text exposition format 0.0.4), no dependency.

Counters and histograms keyed by label tuples, gauges read through callbacks
at scrape time. Label sets must be bounded by their callers (methods, status
codes, a capped list of domains).
"""

import bisect
import collections
import functools
import operator
import os
import platform
import threading
from itertools import repeat

from contentnode.core.traffic import COUNTERS, OTHER

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names, values, extra=()) -> str:
    pairs = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)] + list(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _number(value) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


class Counter:
    kind = "counter"

    def __init__(self, name, help_text, labelnames=()):
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self._values = {}
        self._lock = threading.Lock()

    def inc(self, *labels, amount=1) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0) + amount

    def value(self, *labels):
        return self._values.get(labels, 0)

    def take(self) -> list:
        """[[labels, amount], ...] counted since the last take, now reset (a public worker
        hands its counts to the daemon, which adds them with merge)."""
        with self._lock:
            items, self._values = self._values, {}
        return [[list(labels), amount] for labels, amount in items.items()]

    def merge(self, items) -> None:
        for labels, amount in items:
            self.inc(*labels, amount=amount)

    def samples(self):
        with self._lock:
            items = sorted(self._values.items())
        return [(self.name, _labels(self.labelnames, k), v) for k, v in items]


class Histogram:
    kind = "histogram"
    DEFAULT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

    def __init__(self, name, help_text, labelnames=(), buckets=DEFAULT_BUCKETS):
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self.buckets = tuple(buckets) + (float("inf"),)
        self._series = {}  # labels -> [bucket counts..., sum, count]
        self._lock = threading.Lock()

    def observe_all(self, values: list, *labels) -> None:
        """Observe each of `values` (the sum added in their order, as one by one)."""
        counts = collections.Counter(map(functools.partial(bisect.bisect_left, self.buckets), values))
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = [0] * len(self.buckets) + [0.0, 0]
            for bucket, count in counts.items():
                series[bucket] += count  # cumulated at scrape time
            series[-2] = functools.reduce(operator.add, values, series[-2])
            series[-1] += len(values)

    def take(self) -> list:
        """[[labels, series], ...] observed since the last take, now reset (see Counter.take)."""
        with self._lock:
            items, self._series = self._series, {}
        return [[list(labels), series] for labels, series in items.items()]

    def merge(self, items) -> None:
        with self._lock:
            for labels, series in items:
                mine = self._series.setdefault(tuple(labels), [0] * len(self.buckets) + [0.0, 0])
                if len(series) == len(mine):
                    for i, value in enumerate(series):
                        mine[i] += value

    def samples(self):
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        out = []
        for labels, series in items:
            cumulated = 0
            for bound, count in zip(self.buckets, series):
                cumulated += count
                le = f'le="{_number(bound)}"'
                out.append((self.name + "_bucket", _labels(self.labelnames, labels, [le]), cumulated))
            out.append((self.name + "_sum", _labels(self.labelnames, labels), series[-2]))
            out.append((self.name + "_count", _labels(self.labelnames, labels), series[-1]))
        return out


class Gauge:
    """A value read at scrape time: callback() -> number, or a list of (label values, number)."""

    kind = "gauge"

    def __init__(self, name, help_text, callback, labelnames=()):
        self.name, self.help, self.labelnames = name, help_text, tuple(labelnames)
        self._callback = callback

    def samples(self):
        value = self._callback()
        if isinstance(value, list):
            return [(self.name, _labels(self.labelnames, k), v) for k, v in value]
        return [(self.name, "", value)]


class Registry:
    def __init__(self):
        self._metrics = []

    def add(self, metric):
        self._metrics.append(metric)
        return metric

    def counter(self, name, help_text, labelnames=()):
        return self.add(Counter(name, help_text, labelnames))

    def histogram(self, name, help_text, labelnames=(), buckets=Histogram.DEFAULT_BUCKETS):
        return self.add(Histogram(name, help_text, labelnames, buckets))

    def gauge(self, name, help_text, callback, labelnames=()):
        return self.add(Gauge(name, help_text, callback, labelnames))

    def render(self) -> str:
        lines = []
        for metric in self._metrics:
            lines.append(f"# HELP {metric.name} {metric.help}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            for name, labels, value in metric.samples():
                lines.append(f"{name}{labels} {_number(value)}")
        return "\n".join(lines) + "\n"


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}
LOGIN_RESULTS = ("success", "failure", "locked")
REFUSALS = ("forbidden_address", "forbidden_referer", "forbidden_origin", "rate_limited")   # the public port's edge refusals (public/edge_guard.py), by error code
HOST_LABELS = 50  # hosts with a label of their own, as many as the traffic's domain label
MAX_ANSWERED = 256   # answers appended before they are counted (when nothing reads the metrics): small, as
#                      the thread that appends the last counts them all, often the loop thread (a stall for every connection)
_LABELS, _PORT, _SECONDS = operator.itemgetter(0, 1, 2), operator.itemgetter(0), operator.itemgetter(3)


class CounterView(Gauge):
    """A counter whose values are read at scrape time from totals kept elsewhere."""

    kind = "counter"


def _traffic_rows(traffic, pick):
    """[((port, domain, ...), value)] for every label the traffic knows, "other" always,
    each present at 0 before its first request so alerts have a series."""
    totals = traffic.totals()
    labels = sorted(set(totals) | set(traffic.domains()) | {OTHER})
    zero = dict.fromkeys(COUNTERS, 0)
    return [row for label in labels for row in pick(label, totals.get(label, zero))]


def soonest_per_host(items, limit: int = HOST_LABELS) -> list:
    """[((host,), timestamp)]: the `limit` soonest hosts, then "other" for the soonest of the rest."""
    ordered = sorted(items, key=lambda item: (item[1], item[0]))
    rows = [((host,), when) for host, when in ordered[:limit]]
    if len(ordered) > limit:
        rows.append(((OTHER,), ordered[limit][1]))
    return rows


class NodeMetrics:
    """The daemon's own series: requests by port, method and status; latency; logins; process;
    the build; and, once their services start, public traffic and certificate expiry."""

    def __init__(self, start_time: float, version: str):
        self.registry = Registry()
        self.registry.gauge("contentnode_build_info", "The running build (always 1)",
                            lambda: [((version, platform.python_version()), 1)], ("version", "python"))
        self.requests = self.registry.counter(
            "contentnode_http_requests_total", "HTTP requests answered", ("port", "method", "status"))
        self.duration = self.registry.histogram(
            "contentnode_http_request_duration_seconds", "Time to answer a request", ("port",))
        self.logins = self.registry.counter("contentnode_logins_total", "Login attempts by result", ("result",))
        for result in LOGIN_RESULTS:
            self.logins.inc(result, amount=0)
        self.refusals = self.registry.counter(
            "contentnode_public_refusals_total", "Public requests refused by a rule's edge controls, by reason",
            ("reason",))
        for reason in REFUSALS:
            self.refusals.inc(reason, amount=0)
        self.again = self.registry.counter(
            "contentnode_public_prepared_answers_total",
            "Public memory hits answered from a prepared answer, without the pipeline")
        self.again.inc(amount=0)
        self._answered: collections.deque = collections.deque()   # (port, method, status, seconds) not yet counted
        self._given: collections.deque = collections.deque()      # answers given again, not yet counted
        self._counting = threading.Lock()
        self.registry.gauge("process_start_time_seconds", "Start time of the process (epoch seconds)",
                            lambda: start_time)
        self.registry.gauge("process_resident_memory_bytes", "Resident memory size in bytes", _resident_bytes)

    def observe_request(self, port: str, method: str, status: int, seconds: float) -> None:
        """One answer, after it is sent: appended (deque.append is atomic: no lock on a request's
        path), counted into `requests` and `duration` when they are read or past MAX_ANSWERED.
        The method is kept as its label: a client's own token (up to a head's size) is not held."""
        answered = self._answered
        answered.append((port, method if method in METHODS else "other", status, seconds))
        if len(answered) >= MAX_ANSWERED:
            self.count_answered()

    def observe_again(self) -> None:
        """One public answer given again (public/prepared.py), counted as observe_request counts."""
        given = self._given
        given.append(1)
        if len(given) >= MAX_ANSWERED:
            self.count_answered()

    def count_answered(self) -> None:
        """Add the answers appended so far to their series, each distinct label set once (an
        answer appended meanwhile stays for the next count)."""
        with self._counting:
            answered, given = self._answered, self._given
            rows = list(map(operator.call, repeat(answered.popleft, len(answered))))
            again = sum(map(operator.call, repeat(given.popleft, len(given))))
        if again:
            self.again.inc(amount=again)
        for (port, method, status), count in collections.Counter(map(_LABELS, rows)).items():
            self.requests.inc(port, method, str(status), amount=count)
        ports = set(map(_PORT, rows))
        for port in ports:
            self.duration.observe_all(list(map(_SECONDS, rows)) if len(ports) == 1 else
                                      [row[3] for row in rows if row[0] == port], port)

    def render(self) -> str:
        """The exposition text, every answer so far counted."""
        self.count_answered()
        return self.registry.render()

    def take_requests(self) -> dict:
        """A public worker's request counts since the last take, for the daemon's merge_requests."""
        self.count_answered()
        return {"requests": self.requests.take(), "duration": self.duration.take(), "refusals": self.refusals.take(),
                "again": self.again.take()}

    def merge_requests(self, counts: dict) -> None:
        self.requests.merge(counts.get("requests", ()))
        self.duration.merge(counts.get("duration", ()))
        self.refusals.merge([[labels, amount] for labels, amount in counts.get("refusals", ())
                             if labels and labels[0] in REFUSALS])   # a bounded label set
        self.again.merge([[[], amount] for labels, amount in counts.get("again", ()) if not labels])

    def watch_traffic(self, traffic) -> None:
        """The public port's counters per bounded domain label (core.traffic.Traffic totals)."""
        def family(name, help_text, counter):
            self.registry.add(CounterView(name, help_text, lambda: _traffic_rows(
                traffic, lambda label, values: [(("public", label), values[counter])]), ("port", "domain")))

        family("contentnode_traffic_requests_total", "Public content requests", "requests")
        family("contentnode_traffic_sent_bytes_total", "Public content body bytes sent", "bytes_out")
        family("contentnode_traffic_cache_hits_total", "Public content answers served from the cache",
               "cache_hits")
        family("contentnode_traffic_cache_misses_total", "Public content answers filled from the origin",
               "cache_misses")
        self.registry.add(CounterView(
            "contentnode_traffic_errors_total", "Public content error answers by status class",
            lambda: _traffic_rows(traffic, lambda label, values: [
                (("public", label, "4xx"), values["errors_4xx"]),
                (("public", label, "5xx"), values["errors_5xx"])]),
            ("port", "domain", "class")))

    def watch_certificates(self, certificates) -> None:
        """certificates() -> [(host, not_after epoch seconds, ...)], read at each scrape."""
        self.registry.gauge(
            "contentnode_certificate_expiry_timestamp_seconds",
            "When the certificate installed for a host expires (epoch seconds)",
            lambda: soonest_per_host((host, when) for host, when, *_ in certificates()), ("host",))
