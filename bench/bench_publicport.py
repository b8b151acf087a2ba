"""The public port under many connections (issue 30), beside Debian's nginx (one worker), one run.

- 10 KB and 1 MB cache hits over HTTP and HTTPS, keep-alive, at 32 and at 1,000
  connections: requests/s, CPU per request (the server process's user+system
  time over the requests it answered), p50/p99 latency, errors (a failed
  connect, read or handshake, or an answer other than 200), counted by kind
  below the table: connect, handshake, reset (a read failed), closed (the
  server closed a connection waiting for an answer), unanswered (still
  waiting 10 s after the cell's end), status (an answer other than 200). A
  TLS socket that wakes with no application data (TLS 1.3 session tickets
  arrive after the handshake, apart from the first answer when the server
  answers later) keeps waiting, as any TLS client does: not an error.
- A public process holding 10,000 idle keep-alive connections (each made one
  request first, from 157 loopback addresses under the per-client cap): its RSS
  and threads before and after, and a new client's /healthz time meanwhile.

Goals (the issue): no error at 1,000 connections; <= 8 KB of RSS per idle
connection; threads bounded by the pool; 10 KB hit p99 at 32 connections
<= 5 ms; 10 KB hit requests/s >= 40 % of nginx over HTTP, >= 30 % over HTTPS.

The load generator is Python (one selector loop per CPU, TLS-capable: wrk is
not always installed and has no per-run TLS session setup we control); it
shares the CPUs with both servers, so absolute figures are low and the ratios
against nginx, measured in the same run in interleaved slices, are what to
quote. Everything binds 127.0.0.1; every process started is ended on exit.

    python bench/bench_publicport.py [--duration 6] [--rounds 2] [--idle 10000] [--json FILE]
"""

import argparse
import json
import multiprocessing
import os
import re
import resource
import selectors
import signal
import socket
import ssl
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import _NGINX_TEMPLATE, api, run_cells, start_nginx  # noqa: E402
from common import (HOST, Daemon, cpu_seconds, install_cleanup, loadavg,  # noqa: E402
                    percentile, rss_kib, temp_dir)
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf  # noqa: E402

NAME = "bench.example.test"
FILES = {"10k.bin": 10 * 1024, "1m.bin": 1024 * 1024}
ERROR_KINDS = ("connect", "handshake", "reset", "closed", "unanswered", "status")

# bench_content's nginx, its second server over TLS, room for 1,000 connections and more
_NGINX = (_NGINX_TEMPLATE.replace("worker_processes 1;", "worker_processes 1;\nworker_rlimit_nofile 16384;")
          .replace("worker_connections 1024", "worker_connections 4096")
          .replace("listen 127.0.0.1:{port_ofc};", "listen 127.0.0.1:{port_ofc} ssl;")
          .replace("SECOND", "ssl_certificate {prefix}/html/cert.pem; ssl_certificate_key {prefix}/html/key.pem;"))


def start_node(files: dict, cert: str, key: str) -> tuple:
    """A node serving the files from a folder bucket through its cache; (daemon, HTTPS port)."""
    workdir = temp_dir()
    root = os.path.join(workdir, "root")
    os.makedirs(os.path.join(root, "site"))
    for name, body in files.items():
        with open(os.path.join(root, "site", name), "wb") as f:
            f.write(body)
    daemon = Daemon(workdir, env={"CONTENTNODE_FOLDER_ROOTS": root}).start()
    daemon.setup_admin()
    bucket = api(daemon, "POST", "/api/buckets", {"name": "site", "type": "folder", "path": os.path.join(root, "site")})
    api(daemon, "POST", "/api/domains", {"host": NAME})
    api(daemon, "POST", "/api/rules", {"domain": NAME, "path": "/", "bucket": bucket["id"], "cache_ttl": 86400})
    api(daemon, "POST", "/api/certs/upload", {"host": NAME, "cert_pem": cert, "key_pem": key})
    tls_port = api(daemon, "PUT", "/api/https", {"enabled": True, "port": 0})["listening_port"]
    return daemon, tls_port


# --- the load generator -------------------------------------------------------------------------

def _source(n: int) -> str:
    """The loopback address of connection n: 50 a client address, as many clients would come
    (the node's per-client cap is 64)."""
    return f"127.2.{n // 50 // 250}.{1 + n // 50 % 250}"


def _worker(port: int, tls: bool, request: bytes, first: int, connections: int, duration: float,
            cadata: str) -> tuple:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    context = ssl.create_default_context(cadata=cadata) if tls else None
    sel = selectors.DefaultSelector()
    latencies, kinds = [], dict.fromkeys(ERROR_KINDS, 0)

    made, bad = [first], [0]   # connections made; answers other than 200 on closed connections

    def connect() -> bool:
        made[0] += 1
        try:
            sock = socket.create_connection((HOST, port), timeout=10, source_address=(_source(made[0] % 1000), 0))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            kinds["connect"] += 1
            return False
        try:
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=NAME)
            sock.setblocking(False)
            sock.send(request)
        except OSError:
            kinds["handshake" if context is not None else "reset"] += 1
            sock.close()
            return False
        sel.register(sock, selectors.EVENT_READ, {"head": b"", "need": -1, "bad": 0, "sent": time.monotonic()})
        return True

    for _ in range(connections):
        connect()
    start = time.monotonic()
    deadline, hard = start + duration, start + duration + 10
    while sel.get_map() and time.monotonic() < hard:
        for key, _ in sel.select(timeout=0.5):
            sock, state = key.fileobj, key.data
            chunks, kind = [], "closed"
            try:
                while True:
                    chunk = sock.recv(262144)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    if context is None or not sock.pending():
                        break
            except (BlockingIOError, ssl.SSLWantReadError, InterruptedError):
                if not chunks:
                    continue   # TLS records with no application data (session tickets), or a part of one
            except OSError:
                chunks, kind = [], "reset"
            if not chunks:
                kinds[kind] += 1
                kinds["status"] += state["bad"]
                sel.unregister(sock)
                sock.close()
                if time.monotonic() < deadline:
                    connect()
                continue
            for data in chunks:
                if _consume(state, data) and not _next(sock, state, sel, deadline, latencies, request, bad):
                    break
    for key in list(sel.get_map().values()):
        kinds["unanswered"] += 1
        kinds["status"] += key.data["bad"]
        key.fileobj.close()
    kinds["status"] += bad[0]
    return latencies, kinds, time.monotonic() - start


def _consume(state: dict, data: bytes) -> bool:
    """Take in bytes of one answer (its body counted, not kept); True when it is complete.
    One request is in flight per connection, so nothing follows an answer's last byte."""
    if state["need"] < 0:
        state["head"] += data
        end = state["head"].find(b"\r\n\r\n")
        if end < 0:
            return False
        head = state["head"][:end]
        found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        state["ok"] = head.startswith(b"HTTP/1.1 200")
        state["need"] = (int(found.group(1)) if found else 0) - (len(state["head"]) - end - 4)
        state["head"] = b""
    else:
        state["need"] -= len(data)
    return state["need"] <= 0


def _next(sock, state: dict, sel, deadline: float, latencies: list, request: bytes, bad: list) -> bool:
    """After a complete answer: count it and send the next request, or close past the deadline."""
    now = time.monotonic()
    state["need"] = -1
    if now > deadline:
        bad[0] += state["bad"] + (not state["ok"])
        sel.unregister(sock)
        sock.close()
        return False
    if state["ok"]:
        latencies.append(now - state["sent"])
    else:
        state["bad"] += 1
    state["sent"] = now
    try:
        sock.send(request)
    except OSError:
        state["bad"] += 1
    return True


def run_load(port: int, tls: bool, path: str, connections: int, duration: float, cadata: str) -> dict:
    request = f"GET {path} HTTP/1.1\r\nHost: {NAME}\r\n\r\n".encode()
    procs = max(1, min(connections, os.cpu_count() or 1))
    shares = [connections // procs + (1 if i < connections % procs else 0) for i in range(procs)]
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        parts = pool.starmap(_worker, [(port, tls, request, sum(shares[:i]), n, duration, cadata)
                                       for i, n in enumerate(shares)])
    latencies = [x for lat, _, _ in parts for x in lat]
    kinds = {kind: sum(k[kind] for _, k, _ in parts) for kind in ERROR_KINDS}
    return {"requests": len(latencies), "rps": len(latencies) / duration, "errors": sum(kinds.values()), "kinds": kinds,
            "p50_ms": percentile(latencies, 50) * 1e3 if latencies else float("nan"),
            "p99_ms": percentile(latencies, 99) * 1e3 if latencies else float("nan")}


# --- idle connections ---------------------------------------------------------------------------

def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def hold_idle(daemon, count: int) -> dict:
    """`count` keep-alive connections, each after one /healthz, held open: the process's RSS and threads."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 1024)), hard))
    before = {"rss_kib": rss_kib(daemon.pid), "threads": threads_of(daemon.pid)}
    request = f"GET /healthz HTTP/1.1\r\nHost: {NAME}\r\n\r\n".encode()
    held, failed = [], 0
    for n in range(count):
        try:
            sock = socket.socket()
            sock.bind((f"127.1.{n // 64 // 250}.{1 + n // 64 % 250}", 0))   # 64 per address: the per-client cap
            sock.settimeout(10)
            sock.connect((HOST, daemon.public_port))
            sock.sendall(request)
            if not sock.recv(65536).startswith(b"HTTP/1.1 200"):
                failed += 1
            held.append(sock)
        except OSError:
            failed += 1
    time.sleep(1)
    after = {"rss_kib": rss_kib(daemon.pid), "threads": threads_of(daemon.pid)}
    started = time.monotonic()
    with socket.create_connection((HOST, daemon.public_port), timeout=10) as sock:
        sock.sendall(request)
        answered = sock.recv(65536).startswith(b"HTTP/1.1 200")
    new_client_ms = (time.monotonic() - started) * 1e3
    alive = sum(1 for sock in held[:: max(1, count // 100)] if _still_served(sock, request))
    for sock in held:
        sock.close()
    return {"connections": len(held), "failed": failed, "before": before, "after": after,
            "kib_per_connection": (after["rss_kib"] - before["rss_kib"]) / max(1, len(held)),
            "new_client_ms": new_client_ms, "new_client_ok": answered,
            "sampled_still_served": f"{alive}/{len(held[:: max(1, count // 100)])}"}


def _still_served(sock, request) -> bool:
    try:
        sock.sendall(request)
        return sock.recv(65536).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per cell (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved slices per cell (default 2)")
    parser.add_argument("--idle", type=int, default=10000, help="idle connections held (default 10000)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--cells", help="only the cells whose name holds one of these comma-separated parts, "
                                        "e.g. '10k http c32,1m https c1000' (both servers each)")
    args = parser.parse_args()
    install_cleanup()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    files = {name: os.urandom(size) for name, size in FILES.items()}
    ca_cert, ca_key = make_ca()
    leaf, leaf_key = make_leaf([NAME], ca_cert, ca_key)
    cert, key, cadata = cert_pem(leaf) + cert_pem(ca_cert), key_pem(leaf_key), cert_pem(ca_cert)
    load_before = loadavg()
    daemon, node_tls = start_node(files, cert, key)
    nginx_pid, nginx_port, nginx_tls = start_nginx({**files, "cert.pem": cert.encode(), "key.pem": key.encode()},
                                                   _NGINX)
    for path in files:   # the node's cache holds them before the first measured request
        run_load(daemon.public_port, False, "/" + path, 1, 0.2, cadata)
    cells = {}
    for path in files:
        for scheme, tls in (("http", False), ("https", True)):
            for conns in (32, 1000):
                for server, pid, port in (("node", daemon.pid, node_tls if tls else daemon.public_port),
                                          ("nginx", nginx_pid, nginx_tls if tls else nginx_port)):
                    cells[f"{server} {path[:-4]} {scheme} c{conns}"] = (pid, port, "/" + path, tls, conns)
    if args.cells:
        cells = {name: cell for name, cell in cells.items() if any(part in name for part in args.cells.split(","))}
    kinds = {(cell[1], cell[2], cell[3], cell[4]): dict.fromkeys(ERROR_KINDS, 0) for cell in cells.values()}

    def measure(port, path, tls, conns, seconds):
        one = run_load(port, tls, path, conns, seconds, cadata)
        for kind, count in one["kinds"].items():
            kinds[port, path, tls, conns][kind] += count
        return one

    figures = run_cells(cells, args.duration, args.rounds, measure)
    for name, cell in cells.items():
        figures[name]["kinds"] = kinds[cell[1:]]
    idle = hold_idle(daemon, args.idle) if args.idle else None
    load_after = loadavg()
    print(f"public port vs nginx (one worker); {os.cpu_count()} CPUs; load average {load_before:.1f} before / "
          f"{load_after:.1f} after; Python load generator on the same CPUs")
    print(f"{'cell':<26}{'req/s':>9}{'CPU us/req':>12}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}{'vs nginx':>10}")
    for name, cell in figures.items():
        other = figures.get(name.replace("node ", "nginx ", 1)) if name.startswith("node ") else None
        ratio = f"{cell['rps'] / other['rps']:.0%}" if other and other["rps"] else ""
        print(f"{name:<26}{cell['rps']:>9.0f}{cell['cpu_us']:>12.1f}{cell['p50_ms']:>9.2f}{cell['p99_ms']:>9.2f}"
              f"{cell['errors']:>8}{ratio:>10}")
    for name, cell in figures.items():
        if cell["errors"]:
            print(f"errors of {name}: " + ", ".join(f"{kind} {n}" for kind, n in cell["kinds"].items() if n))
    if idle:
        print(f"idle: {idle['connections']} keep-alive connections held ({idle['failed']} failed); RSS "
              f"{idle['before']['rss_kib']} -> {idle['after']['rss_kib']} KiB ({idle['kib_per_connection']:.2f} KiB "
              f"each); threads {idle['before']['threads']} -> {idle['after']['threads']}; a new client's /healthz "
              f"{idle['new_client_ms']:.1f} ms ({'200' if idle['new_client_ok'] else 'FAILED'}); sampled ones still "
              f"served {idle['sampled_still_served']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cells": figures, "idle": idle, "load": [load_before, load_after]}, f, indent=1)
    daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
