"""Start the real daemon on free loopback ports and talk HTTP to it."""

import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from contentnode import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN_USER = "admin"
ADMIN_PASSWORD = "correct horse battery staple"
# argon2id at its least cost, through the documented start-up values hash_memory_kib and
# hash_time_cost: at the default cost each hash is ~30 ms of CPU, and every node start, setup,
# login and password change makes one (hundreds in the suite). A test that depends on the real
# cost (the lockout under 40 simultaneous guesses) is marked `default_hash_cost` (conftest.py).
LEAST_HASH_COST = {"CONTENTNODE_HASH_MEMORY_KIB": "8", "CONTENTNODE_HASH_TIME_COST": "1"}
# The SIGTERM drain (drain_seconds, docs/API.md "Health and drain") would add its seconds to
# every stop of a test daemon; tests/test_drain.py sets it where the drain is what it tests.
NO_DRAIN = {"CONTENTNODE_DRAIN_SECONDS": "0"}
DEFAULT_HASH_COST = {"CONTENTNODE_" + o.name.upper(): str(o.default) for o in config.OPTIONS
                     if o.name in ("hash_memory_kib", "hash_time_cost")}


def stop_process(proc, timeout, kill_timeout=None):
    """SIGTERM a running process and give it `timeout` s to exit; then SIGKILL it and
    wait `kill_timeout` s (None: until it is gone)."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(kill_timeout)


@dataclass
class Resp:
    status: int
    headers: dict  # lower-case names; Set-Cookie values joined with "\n"
    body: bytes

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def error_code(self):
        data = self.json
        return data.get("error", {}).get("code") if isinstance(data, dict) else None


class Node:
    """One daemon process with its own data dir; ports are chosen by the OS (port 0).

    `env` is added to this process's environment; password hashes cost LEAST_HASH_COST
    unless `env` sets the cost (DEFAULT_HASH_COST: the node's own defaults), and SIGTERM
    stops it without a drain unless `env` sets CONTENTNODE_DRAIN_SECONDS. `launcher`
    runs the daemon (e.g. under a seccomp filter).
    """

    def __init__(self, workdir: str, env: dict | None = None, args=(), launcher=()):
        self.workdir = workdir
        self.data_dir = os.path.join(workdir, "data")
        self.clock_file = os.path.join(workdir, "clock")
        self.ready_file = os.path.join(workdir, "ready")
        self.log_path = os.path.join(workdir, "daemon.log")
        self.extra_env = {**LEAST_HASH_COST, **NO_DRAIN, **(env or {})}
        self.args = list(args)
        self.launcher = list(launcher)   # argv put before the daemon's: a seccomp filter (tests/peers/seccomp_exec.py), setpriv
        self.root = ROOT   # the source tree the daemon runs from (an older build's, for upgrade tests)
        self.proc = None
        self.admin_port = self.public_port = None
        with open(self.clock_file, "w") as f:
            f.write("0")

    def start(self, timeout: float = 20.0) -> "Node":
        if os.path.exists(self.ready_file):
            os.unlink(self.ready_file)
        env = dict(os.environ, PYTHONPATH=self.root, CONTENTNODE_TEST_CLOCK_FILE=self.clock_file,
                   CONTENTNODE_READY_FILE=self.ready_file)
        env.update(self.extra_env)
        cmd = [*self.launcher, sys.executable, "-m", "contentnode", "serve", "--data-dir", self.data_dir,
               "--admin-port", "0", "--public-port", "0", "--public-bind", "127.0.0.1", *self.args]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            if os.path.exists(self.ready_file):
                with open(self.ready_file) as f:
                    content = f.read().split()
                if len(content) == 2:
                    self.admin_port, self.public_port = map(int, content)
                    return self
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"daemon did not become ready in {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        stop_process(self.proc, timeout)
        self._close_log()
        return self.proc.returncode if self.proc else 0

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def close(self) -> None:
        """The end of a test: SIGKILL (nothing to wait for; the data dir is thrown away)."""
        self.kill()

    def _close_log(self):
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None

    def restart(self) -> "Node":
        self.stop()
        return self.start()

    def set_clock_offset(self, seconds: float) -> None:
        """Shift the daemon's clock (it re-reads the file when it changes)."""
        tmp = self.clock_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(seconds))
        os.replace(tmp, self.clock_file)

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def client(self, port: str = "admin", host: str | None = None) -> "Client":
        return Client(self, port, host)

    def cli(self, *args, input_text: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run `python -m contentnode ARGS --data-dir <this node's>` (offline commands)."""
        env = dict(os.environ, PYTHONPATH=self.root)
        return subprocess.run([sys.executable, "-m", "contentnode", *args, "--data-dir", self.data_dir],
                              input=input_text, capture_output=True, text=True, env=env, timeout=timeout)


class Client:
    """An HTTP client with a cookie jar, one request per connection unless keep-alive is asked for."""

    def __init__(self, node: Node, port: str = "admin", host: str | None = None):
        self.node = node
        self.port_name = port
        self.host = host
        self.cookies = {}

    @property
    def port(self) -> int:
        return self.node.admin_port if self.port_name == "admin" else self.node.public_port

    def request(self, method: str, path: str, obj=None, headers: dict | None = None,
                body: bytes | None = None, timeout: float = 30) -> Resp:
        hdrs = {}
        if self.host:
            hdrs["Host"] = self.host
        if obj is not None:
            body = json.dumps(obj).encode()
            hdrs["Content-Type"] = "application/json"
        if self.cookies:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        hdrs.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=hdrs)
            response = conn.getresponse()
            data = response.read()
            merged = {}
            for name, value in response.getheaders():
                key = name.lower()
                merged[key] = f"{merged[key]}\n{value}" if key in merged else value
                if key == "set-cookie":
                    self._remember(value)
            return Resp(response.status, merged, data)
        finally:
            conn.close()

    def _remember(self, set_cookie: str) -> None:
        first, *attrs = [p.strip() for p in set_cookie.split(";")]
        name, _, value = first.partition("=")
        if any(a.lower() == "max-age=0" for a in attrs) or not value:
            self.cookies.pop(name, None)
        else:
            self.cookies[name] = value

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, obj=None, **kw):
        return self.request("POST", path, obj, **kw)

    def put(self, path, obj=None, **kw):
        return self.request("PUT", path, obj, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def login(self, username: str, password: str) -> Resp:
        return self.post("/api/login", {"username": username, "password": password})
