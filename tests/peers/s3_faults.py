"""A proxy on loopback in front of a real bucket (SeaweedFS) that can be made to fail: answer
500 to everything (`failing`), or hold each request `delay` seconds before passing it on (a
slow bucket). The request goes upstream as the node signed it, Host header included, so the
bucket checks the node's own signature. `log` holds (monotonic time, method, path, whether it
carried If-None-Match, the status answered) of each request."""

import http.client
import threading
import time
import urllib.parse

from tests.peers.stub import LoopbackServer, QuietHandler

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-connection", "content-length"}
ERROR = b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code><Message>injected</Message></Error>'


class FaultyProxy:
    def __init__(self, upstream: str):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname, parsed.port)
        self.failing = False
        self.delay = 0.0
        self.log = []
        self.lock = threading.Lock()
        self.server = LoopbackServer(self._handler(), name="s3-faults", poll_interval=0.1)
        self.endpoint = self.server.url

    def close(self):
        self.server.stop()

    def requests(self, since: float, path_end: str) -> int:
        with self.lock:
            return sum(1 for at, _, path, *_ in self.log if at >= since and path.split("?")[0].endswith(path_end))

    def answers(self, since: float, path_end: str, until: float = float("inf")) -> list:
        """(conditional, status) of each request that arrived from `since` to `until` for a key ending
        in `path_end`; the status is None while the request is still being forwarded."""
        with self.lock:
            return [(conditional, status) for at, _, path, conditional, status in self.log
                    if since <= at < until and path.split("?")[0].endswith(path_end)]

    def _handler(self):
        proxy = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                entry = [time.monotonic(), self.command, self.path, "if-none-match" in self.headers, None]
                with proxy.lock:
                    proxy.log.append(entry)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.delay:
                    time.sleep(proxy.delay)
                if proxy.failing:
                    entry[4] = 500
                    return self.reply(500, ERROR, "application/xml")
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        if name.lower() not in HOP_BY_HOP:
                            conn.putheader(name, value)
                    conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders(body)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                entry[4] = answer.status
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP_BY_HOP:
                        self.send_header(name, value)
                length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _forward

        return Handler
