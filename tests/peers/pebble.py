"""Real ACME peer: Debian's pebble with pebble-challtestsrv as its DNS, on loopback.

pebble validates HTTP-01 by connecting to the name's address (challtestsrv
answers 127.0.0.1 for every name) on `http_port`, which the tests set to the
node's public port. pebble's own TLS listener uses a CA made here, so the node
can be told to trust exactly that (SSL_CERT_FILE). A missing binary fails the
test with a clear message.
"""

import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request

from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.node import stop_process
from tests.peers.check import CHALLTESTSRV, PEBBLE

START_TIMEOUT = 30.0


def _require(path):
    """Debian's binary at its fixed place (never PATH's)."""
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"{path} is not installed: the ACME tests need Debian's pebble package "
            "(apt-get install pebble), which ships pebble and pebble-challtestsrv")
    return path


def free_port(udp_too=False) -> int:
    """A port free on 127.0.0.1 for TCP (and UDP when asked)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            if not udp_too:
                return port
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no free port found on 127.0.0.1")


def _wait(check, what, proc, log_path):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {_tail(log_path)}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not come up within {START_TIMEOUT:g} s: {_tail(log_path)}")


def _tail(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-2000:]
    except OSError:
        return "(no log)"


class _Process:
    def __init__(self, workdir, name, argv, env=None):
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=workdir)

    def stop(self):
        stop_process(self.proc, timeout=10, kill_timeout=10)
        self._log.close()


class ChallTestSrv:
    """pebble-challtestsrv as a mock DNS server only (its challenge listeners off)."""

    def __init__(self, workdir, default_ipv4="127.0.0.1", default_ipv6=""):
        binary = _require(CHALLTESTSRV)
        for attempt in range(3):  # another test run may grab a port between probe and bind
            self.dns_port = free_port(udp_too=True)
            self.management_port = free_port()
            self.dns_address = f"127.0.0.1:{self.dns_port}"
            self._process = _Process(workdir, f"challtestsrv-{self.dns_port}", [
                binary, "-defaultIPv4", default_ipv4, "-defaultIPv6", default_ipv6,
                "-dns01", self.dns_address, "-http01", "", "-https01", "", "-tlsalpn01", "",
                "-management", f"127.0.0.1:{self.management_port}"])
            try:
                _wait(self._ready, "pebble-challtestsrv", self._process.proc, self._process.log_path)
                return
            except RuntimeError:
                self._process.stop()
                if attempt == 2:
                    raise

    def _ready(self):
        with socket.create_connection(("127.0.0.1", self.management_port), timeout=0.5):
            pass
        return self._answers_dns()

    def _answers_dns(self):
        query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04test\x00\x00\x01\x00\x01"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.5)
            s.sendto(query, ("127.0.0.1", self.dns_port))
            try:
                return s.recv(512)[:2] == b"\x12\x34"
            except TimeoutError:
                return False

    def manage(self, path, payload):
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.management_port}{path}", data=json.dumps(payload).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status

    def add_a(self, host, addresses):
        return self.manage("/add-a", {"host": host, "addresses": addresses})

    def stop(self):
        self._process.stop()


class Pebble:
    """pebble on free loopback ports with its own DNS and listener CA.

    Two steps, because each side needs the other's details: the constructor
    makes the DNS server and the listener CA (the node is started with
    SSL_CERT_FILE=ca_file and its DNS resolver = dns.dns_address), then
    `start(http_port)` runs pebble validating HTTP-01 on the node's public port.
    """

    def __init__(self, workdir: str | None = None):
        self._binary = _require(PEBBLE)
        self._own_dir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="pebble-")
        self._process = None
        self.dns = ChallTestSrv(self.workdir)
        ca, ca_key = make_ca("pebble listener test CA")
        leaf, leaf_key = make_leaf(["localhost"], ca, ca_key, ips=["127.0.0.1"])
        self.ca_file, self._cert_file, self._key_file = (
            os.path.join(self.workdir, n) for n in ("listener-ca.pem", "listener.pem", "listener.key"))
        for path, text in ((self.ca_file, cert_pem(ca)), (self._cert_file, cert_pem(leaf)),
                           (self._key_file, key_pem(leaf_key))):
            with open(path, "w") as f:
                f.write(text)
        self.port, self.management_port = free_port(), free_port()
        self.directory_url = f"https://127.0.0.1:{self.port}/dir"

    def start(self, http_port: int) -> "Pebble":
        """Start pebble; when a port chosen free was taken before pebble bound it (another test
        worker), choose new ones and start again, at most three times."""
        for attempt in range(3):
            try:
                return self._start_once(http_port)
            except BaseException as exc:
                if attempt == 2 or "address already in use" not in str(exc):
                    self.stop()
                    raise
                self.port, self.management_port = free_port(), free_port()
                self.directory_url = f"https://127.0.0.1:{self.port}/dir"

    def _start_once(self, http_port: int) -> "Pebble":
        config = {"pebble": {
            "listenAddress": f"127.0.0.1:{self.port}",
            "managementListenAddress": f"127.0.0.1:{self.management_port}",
            "certificate": self._cert_file, "privateKey": self._key_file,
            "httpPort": http_port, "tlsPort": free_port(),
            "ocspResponderURL": "", "externalAccountBindingRequired": False}}
        config_file = os.path.join(self.workdir, "pebble.json")
        with open(config_file, "w") as f:
            json.dump(config, f)
        env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_VA_ALWAYS_VALID="0")
        self._process = _Process(self.workdir, "pebble", [
            self._binary, "-config", config_file, "-dnsserver", self.dns.dns_address], env=env)
        try:
            _wait(lambda: self._get(self.directory_url).startswith(b"{"), "pebble",
                  self._process.proc, self._process.log_path)
        except BaseException:
            self._process.stop()
            raise
        return self

    def tls_context(self) -> ssl.SSLContext:
        """Trusts pebble's listener (not the certificates it issues)."""
        return ssl.create_default_context(cafile=self.ca_file)

    def _get(self, url) -> bytes:
        with urllib.request.urlopen(url, timeout=5, context=self.tls_context()) as response:
            return response.read()

    def issuing_root_pem(self) -> str:
        """The root that pebble's issued chains lead to (management /roots/0)."""
        return self._get(f"https://127.0.0.1:{self.management_port}/roots/0").decode()

    def log(self) -> str:
        return _tail(self._process.log_path) if self._process else ""

    def stop(self):
        if self._process:
            self._process.stop()
        self.dns.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)
