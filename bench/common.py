"""Helpers shared by the benchmarks: start the daemon, a bare baseline server, load.

Everything here talks to 127.0.0.1 only, every wait has a deadline, and every
process started is recorded so that `cleanup()` (also run at exit and on
SIGTERM/SIGINT) ends it.

Load comes from wrk (Debian's /usr/bin/wrk) when it is installed; otherwise
from `python_load`, a small keep-alive generator (one selector loop per
process, connections spread over up to os.cpu_count() processes).

`python bench/common.py bare PORT_FILE BODIES_JSON` runs the bare baseline:
a plain http.server.ThreadingHTTPServer (HTTP/1.1, keep-alive) answering GET
with the bytes given per path in BODIES_JSON.
"""

import atexit
import ctypes
import http.client
import json
import multiprocessing
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRK = shutil.which("wrk") or ("/usr/bin/wrk" if os.access("/usr/bin/wrk", os.X_OK) else None)
HOST = "127.0.0.1"

_PROCESSES = []   # every Popen started here, ended by cleanup()
_TEMP_DIRS = []
_OWNER = os.getpid()  # forked load workers inherit the lists; only this process cleans up


# --- house-keeping ---------------------------------------------------------------

def cleanup() -> None:
    """End every process started here (SIGTERM, then SIGKILL) and remove temp dirs."""
    if os.getpid() != _OWNER:
        return
    while _PROCESSES:
        proc = _PROCESSES.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    while _TEMP_DIRS:
        shutil.rmtree(_TEMP_DIRS.pop(), ignore_errors=True)


def _on_signal(signum, frame):
    cleanup()
    raise SystemExit(128 + signum)


def install_cleanup() -> None:
    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def temp_dir(prefix: str = "contentnode-bench-") -> str:
    """A temp dir removed at cleanup. Under $TMPDIR: keep it on a real disk for fsync figures."""
    path = tempfile.mkdtemp(prefix=prefix)
    _TEMP_DIRS.append(path)
    return path


def _die_with_parent() -> None:
    """In each started process before it runs: SIGTERM when the benchmark's process dies, kill -9
    included (PR_SET_PDEATHSIG), so no server it started outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # 1: PR_SET_PDEATHSIG


def _spawn(cmd, **kw) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, preexec_fn=_die_with_parent, **kw)
    _PROCESSES.append(proc)
    return proc


def _reap(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc in _PROCESSES:
        _PROCESSES.remove(proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def percentile(values, p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(p / 100 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def median(values) -> float:
    return statistics.median(values)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg() -> float:
    """The 1-minute load average (other work on the machine skews every figure)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    """VmRSS (or VmHWM, ...) of a process in KiB, from /proc/<pid>/status."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# --- tiny HTTP client --------------------------------------------------------------

def http_request(port: int, method: str, path: str, obj=None, headers: dict | None = None,
                 timeout: float = 30.0):
    """(status, {lower-case header: value}, body) for one request on a fresh connection."""
    hdrs = dict(headers or {})
    body = None
    if obj is not None:
        body = json.dumps(obj).encode()
        hdrs["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def wait_http(port: int, path: str, deadline: float, proc: subprocess.Popen | None = None,
              interval: float = 0.002) -> float:
    """Poll GET path until it answers 200; return the monotonic time of the answer."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before answering {path}")
        try:
            status, _, _ = http_request(port, "GET", path, timeout=1.0)
            if status == 200:
                return time.monotonic()
        except OSError:
            pass
        time.sleep(interval)
    raise RuntimeError(f"no 200 from 127.0.0.1:{port}{path} before the deadline")


# --- the daemon ---------------------------------------------------------------------

class _Child:
    """A benchmark's child process (`self.proc`): its pid, and stop() that always reaps it."""

    proc = None

    def stop(self) -> None:
        if self.proc is not None:
            _reap(self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid


class Daemon(_Child):
    """`python -m contentnode serve` on free loopback ports, like tests/node.py starts it."""

    def __init__(self, workdir: str, log_level: str | None = "warning", env: dict | None = None):
        self.workdir = workdir
        self.data_dir = os.path.join(workdir, "data")
        self.ready_file = os.path.join(workdir, "ready")
        self.log_path = os.path.join(workdir, "daemon.log")
        self.log_level = log_level
        self.extra_env = dict(env or {})
        self.proc = None
        self.admin_port = self.public_port = None
        self.cookie = None
        self.password = None

    def _env(self) -> dict:
        env = dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_READY_FILE=self.ready_file, **self.extra_env)
        env.pop("CONTENTNODE_LOG_LEVEL", None)
        if self.log_level:
            env["CONTENTNODE_LOG_LEVEL"] = self.log_level
        return env

    def _cmd(self, admin_port: int, public_port: int) -> list:
        return [sys.executable, "-m", "contentnode", "serve", "--data-dir", self.data_dir,
                "--admin-port", str(admin_port), "--public-port", str(public_port),
                "--public-bind", HOST, "--admin-bind", HOST]

    def _popen(self, admin_port: int, public_port: int) -> None:
        if os.path.exists(self.ready_file):
            os.unlink(self.ready_file)
        with open(self.log_path, "ab") as log:
            self.proc = _spawn(self._cmd(admin_port, public_port), env=self._env(), stdout=log,
                               stderr=subprocess.STDOUT, cwd=self.workdir)

    def start(self, timeout: float = 20.0) -> "Daemon":
        """Start on OS-chosen ports (port 0), learnt from CONTENTNODE_READY_FILE."""
        self._popen(0, 0)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log_tail()}")
            if os.path.exists(self.ready_file):
                with open(self.ready_file) as f:
                    parts = f.read().split()
                if len(parts) == 2:
                    self.admin_port, self.public_port = map(int, parts)
                    return self
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"daemon not ready in {timeout} s:\n{self.log_tail()}")

    def timed_start(self, timeout: float = 20.0) -> float:
        """Start on ports chosen beforehand; seconds from spawn to the first 200 on /healthz."""
        self.admin_port, self.public_port = free_port(), free_port()
        started = time.monotonic()
        self._popen(self.admin_port, self.public_port)
        try:
            answered = wait_http(self.admin_port, "/healthz", started + timeout, self.proc)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{self.log_tail()}") from None
        return answered - started


    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def setup_admin(self, username: str = "admin", password: str = "bench horse battery staple 42") -> str:
        """POST /api/setup; remember and return the session cookie ("name=value")."""
        status, headers, body = http_request(self.admin_port, "POST", "/api/setup",
                                             {"username": username, "password": password}, timeout=60)
        if status != 201:
            raise RuntimeError(f"/api/setup answered {status}: {body[:300]!r}")
        self.cookie = headers["set-cookie"].split(";", 1)[0]
        self.password = password
        return self.cookie


# --- the bare baseline server -----------------------------------------------------------

class BareServer(_Child):
    """A plain ThreadingHTTPServer in its own process answering fixed bodies per path."""

    def __init__(self, workdir: str, bodies: dict):
        self.workdir = workdir
        self.bodies = bodies  # path -> bytes
        self.port = None
        self.proc = None

    def start(self, timeout: float = 10.0) -> "BareServer":
        port_file = os.path.join(self.workdir, "bare.port")
        bodies_file = os.path.join(self.workdir, "bare.bodies.json")
        with open(bodies_file, "w") as f:
            json.dump({p: b.decode("latin-1") for p, b in self.bodies.items()}, f)
        self.proc = _spawn([sys.executable, os.path.abspath(__file__), "bare", port_file, bodies_file],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bare server exited with {self.proc.returncode}")
            try:
                with open(port_file) as f:
                    self.port = int(f.read())  # written whole (temp file + rename)
                return self
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        self.stop()
        raise RuntimeError("bare server did not start")



def _serve_bare(port_file: str, bodies_file: str) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with open(bodies_file) as f:
        bodies = {p: b.encode("latin-1") for p, b in json.load(f).items()}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as the daemon does; else Nagle + delayed ACK distort it

        def do_GET(self):
            body = bodies.get(self.path.split("?", 1)[0])
            status = 200 if body is not None else 404
            body = body if body is not None else b'{"error":{"code":"not_found","message":"no"}}\n'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server((HOST, 0), Handler)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(tmp, port_file)
    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.25)
    finally:
        server.server_close()


# --- load ---------------------------------------------------------------------------------

def loadgen_name(choice: str = "auto") -> str:
    if choice == "wrk" and not WRK:
        raise RuntimeError("wrk was asked for but is not installed (apt-get install wrk)")
    if choice == "auto":
        return "wrk" if WRK else "python"
    return choice


def load(port: int, path: str, connections: int, duration: float, headers: dict | None = None,
         tool: str = "auto", script: str | None = None) -> dict:
    """Keep-alive GET load for `duration` seconds; {"rps", "requests", "errors", "p50_ms", "p99_ms"}.
    `script`: a wrk Lua script file (its `request` function picks each path); wrk only."""
    if loadgen_name(tool) == "wrk" or script:
        return wrk_load(port, path, connections, duration, headers, script)
    return python_load(port, path, connections, duration, headers)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def wrk_load(port: int, path: str, connections: int, duration: float, headers: dict | None = None,
             script: str | None = None) -> dict:
    if not WRK:
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    cmd = [WRK, "-t1", f"-c{connections}", f"-d{max(1, int(round(duration)))}s", "--latency",
           "--timeout", "5s"] + (["-s", script] if script else [])
    for name, value in (headers or {}).items():
        cmd += ["-H", f"{name}: {value}"]
    cmd.append(f"http://{HOST}:{port}{path}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    total = re.search(r"(\d+) requests in", out)
    if not rps or not total:
        raise RuntimeError(f"cannot read wrk output:\n{out}")
    errors = sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors += int(non2xx.group(1)) if non2xx else 0
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    return {"rps": float(rps.group(1)), "requests": int(total.group(1)), "errors": errors,
            "p50_ms": _ms(p50.group(1)) if p50 else float("nan"),
            "p99_ms": _ms(p99.group(1)) if p99 else float("nan")}


def _load_worker(port: int, request: bytes, connections: int, duration: float) -> tuple:
    """One process: `connections` keep-alive sockets in a selector loop until the deadline."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sel = selectors.DefaultSelector()
    latencies, errors = [], 0
    start = time.monotonic()
    deadline = start + duration
    hard_deadline = deadline + 5.0  # a stuck response is abandoned, never waited for forever

    def connect():
        s = socket.create_connection((HOST, port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        state = {"buf": b"", "sent": time.monotonic()}
        s.send(request)
        sel.register(s, selectors.EVENT_READ, state)

    for _ in range(connections):
        connect()
    while sel.get_map() and time.monotonic() < hard_deadline:
        for key, _ in sel.select(timeout=0.5):
            sock, state = key.fileobj, key.data
            try:
                chunk = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                errors += 1
                sel.unregister(sock)
                sock.close()
                if time.monotonic() < deadline:
                    connect()
                continue
            state["buf"] += chunk
            while True:
                buf = state["buf"]
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buf[:end].decode("latin-1")
                m = re.search(r"(?im)^content-length:\s*(\d+)", head)
                length = int(m.group(1)) if m else 0
                if len(buf) < end + 4 + length:
                    break
                state["buf"] = buf[end + 4 + length:]
                now = time.monotonic()
                if not head.startswith("HTTP/1.1 2"):
                    errors += 1
                if now <= deadline:
                    latencies.append(now - state["sent"])
                    state["sent"] = now
                    sock.send(request)
                else:
                    sel.unregister(sock)
                    sock.close()
                    break
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    return latencies, errors, duration


def python_load(port: int, path: str, connections: int, duration: float, headers: dict | None = None) -> dict:
    """The fallback load generator when wrk is missing (it shares the CPUs with the server)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {HOST}:{port}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    procs = max(1, min(connections, os.cpu_count() or 1))
    shares = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(procs) as pool:
        parts = pool.starmap(_load_worker, [(port, request, n, duration) for n in shares])
    latencies = [x for lat, _, _ in parts for x in lat]
    errors = sum(e for _, e, _ in parts)
    return {"rps": len(latencies) / duration, "requests": len(latencies), "errors": errors,
            "p50_ms": percentile(latencies, 50) * 1e3 if latencies else float("nan"),
            "p99_ms": percentile(latencies, 99) * 1e3 if latencies else float("nan")}


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "bare":
        _serve_bare(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: python bench/common.py bare PORT_FILE BODIES_JSON")
