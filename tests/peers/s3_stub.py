"""A small in-memory S3 bucket on loopback, for what SeaweedFS cannot show.

Some S3-compatible servers accept `If-None-Match` / `If-Match` on writes and
silently ignore them; SeaweedFS honours them, so the fallback path (no lease,
the primary the only issuer) needs a bucket that ignores them:
`S3Stub(honour_conditions=False)`. With `honour_conditions=True` it honours
them like S3 does, and its clock can be moved (`clock_offset`, seconds added
to the Date and Last-Modified it answers), to show that a lease's age is
judged by the bucket's clock, not the node's.

Path-style only (`/<bucket>/<key>`), any bucket name, signatures not checked
(the node's signing is tested against SeaweedFS). PUT, GET (If-None-Match),
HEAD, DELETE; `log` lists every request.
"""

import email.utils
import html
import hashlib
import threading
import time
import urllib.parse

import pytest

from tests.peers.stub import LoopbackServer, QuietHandler

MAX_BODY = 1 << 20
ERROR = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
         "<Message>{code}</Message></Error>")


class S3Stub:
    def __init__(self, honour_conditions: bool):
        self.honour_conditions = honour_conditions
        self.clock_offset = 0.0
        self.objects = {}  # path -> (body, etag, modified epoch)
        self.log = []  # (method, path) of every request
        self.lock = threading.Lock()
        self.server = LoopbackServer(self._handler(), name="s3-stub", poll_interval=0.1)
        self.endpoint = self.server.url

    def now(self) -> float:
        return time.time() + self.clock_offset

    def close(self):
        self.server.stop()

    def bucket_definition(self, bucket: str) -> dict:
        return {"endpoint": self.endpoint, "region": "us-east-1", "bucket": bucket,
                "access_key": "stub", "secret_key": "stub-secret", "path_style": True}

    def _handler(self):
        stub = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def date_time_string(self, timestamp=None):
                return email.utils.formatdate(stub.now(), usegmt=True)

            def parse_request(self):
                ok = super().parse_request()
                if ok:
                    with stub.lock:
                        stub.log.append((self.command, self.path))
                return ok

            def error(self, status, code):
                self.reply(status, ERROR.format(code=code).encode(), "application/xml")

            def refused(self, current) -> bool:
                """True when a write's precondition fails (and the server honours conditions)."""
                if not stub.honour_conditions:
                    return False
                if self.headers.get("If-None-Match") == "*" and current is not None:
                    return True
                wanted = self.headers.get("If-Match")
                return wanted is not None and (current is None or current[1] != wanted)

            def object_headers(self, item):
                self.send_header("ETag", item[1])
                self.send_header("Last-Modified", email.utils.formatdate(item[2], usegmt=True))

            def do_PUT(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    return self.error(413, "EntityTooLarge")
                body = self.rfile.read(length)
                with stub.lock:
                    if self.refused(stub.objects.get(self.path)):
                        return self.error(412, "PreconditionFailed")
                    item = (body, f'"{hashlib.md5(body).hexdigest()}"', stub.now())
                    stub.objects[self.path] = item
                self.send_response(200)
                self.send_header("ETag", item[1])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def list_objects(self, query: dict):
                """ListObjectsV2 of one page (what fleet/challenges reads), keys in name order."""
                bucket = urllib.parse.urlsplit(self.path).path.rstrip("/")
                prefix = query.get("prefix", [""])[0]
                with stub.lock:
                    found = sorted((path[len(bucket) + 1:], item) for path, item in stub.objects.items()
                                   if path.startswith(f"{bucket}/{prefix}"))
                contents = "".join(f"<Contents><Key>{html.escape(key)}</Key><Size>{len(item[0])}</Size>"
                                   f"<ETag>{html.escape(item[1])}</ETag></Contents>" for key, item in found)
                self.reply(200, f"<ListBucketResult><IsTruncated>false</IsTruncated>{contents}"
                                f"</ListBucketResult>".encode(), "application/xml")

            def do_GET(self, head=False):
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                if query.get("list-type") == ["2"]:
                    return self.list_objects(query)
                with stub.lock:
                    item = stub.objects.get(self.path)
                if item is None and head:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
                if item is None:
                    return self.error(404, "NoSuchKey")
                if self.headers.get("If-None-Match") == item[1]:
                    self.send_response(304)
                    self.object_headers(item)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.object_headers(item)
                self.send_header("Content-Length", str(len(item[0])))
                self.end_headers()
                if not head:
                    self.wfile.write(item[0])

            def do_HEAD(self):
                self.do_GET(head=True)

            def do_DELETE(self):
                with stub.lock:
                    current = stub.objects.get(self.path)
                    if self.headers.get("If-Match") is not None and self.refused(current):
                        return self.error(412, "PreconditionFailed")
                    stub.objects.pop(self.path, None)
                self.send_response(204)
                self.end_headers()

        return Handler


@pytest.fixture
def honouring_stub():
    stub = S3Stub(honour_conditions=True)
    yield stub
    stub.close()


@pytest.fixture
def ignoring_stub():
    stub = S3Stub(honour_conditions=False)
    yield stub
    stub.close()
