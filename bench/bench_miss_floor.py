"""The floor under a Python proxy's miss: the least any Python process can spend per proxied request.

bench_origin.py's miss goal (issue 31: the node at half of nginx's misses per
second) asks how fast a Python proxy can relay one request to a kept-alive
origin and its answer back. This measures two relays that do far less than
any proxy must (no header parsed beyond Content-Length, nothing dropped or
added, no cache look-up, no rule, no log, no limit), each in one process of
its own, beside nginx's miss (bench_origin.py's proxy, same origin, same
10 KB no-store answer) and the node's, interleaved in one run:

- `epoll`: one thread, non-blocking sockets on one `selectors` loop, each
  client connection with its own kept-alive origin connection (no thread
  handoff at all: the best case for a Python event loop);
- `threads`: a thread per client connection, blocking sockets, the same
  pairing (ThreadingHTTPServer's model, a thread per request);
- `parked`: the node's own shape: a loop thread parks idle connections in
  epoll and hands a readable one through a queue to a pool thread, which
  serves it with blocking sockets and parks it again.

What each relay reaches against nginx is the most a proxy of its design can
reach here: whatever a real proxy does per request comes on top.

    python bench/bench_miss_floor.py [--duration 6] [--rounds 3]

Everything binds 127.0.0.1; every process started is ended on exit.
"""

import argparse
import os
import queue
import select
import selectors
import socket
import sys
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(1, os.path.dirname(BENCH))

from bench_content import print_figures, run_cells  # noqa: E402
from bench_origin import HOST, SIZE, check_answers, start_proxies  # noqa: E402
from common import _spawn, free_port, install_cleanup, loadavg, wait_http  # noqa: E402

UPSTREAM_REQUEST = b"GET /nostore/obj.bin HTTP/1.1\r\nHost: origin\r\n\r\n"


def answer_end(buffer: bytes) -> int:
    """Where the first whole answer in `buffer` ends (its Content-Length counted), or -1."""
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        return -1
    head = buffer[:head_end + 2].lower()   # the head only: the body is 10 KB copied for nothing
    at = head.find(b"\r\ncontent-length:")
    length = int(head[at + 17:head.index(b"\r\n", at + 2)]) if at >= 0 else 0
    end = head_end + 4 + length
    return end if len(buffer) >= end else -1


def relay_blocking(pending: bytes, upstream: socket.socket, client: socket.socket) -> bytes:
    """Relay each whole request head in `pending` (blocking sockets): the origin's answer to the
    client; returns what is left of `pending`."""
    while b"\r\n\r\n" in pending:
        pending = pending[pending.index(b"\r\n\r\n") + 4:]
        upstream.sendall(UPSTREAM_REQUEST)
        answer = b""
        while (end := answer_end(answer)) < 0:
            answer += upstream.recv(65536)
        client.sendall(answer[:end])
    return pending


def relay_threads(port: int, origin_port: int) -> None:
    """A thread per client connection, each with one kept-alive origin connection."""
    def serve(client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", origin_port))
        pending = b""
        with client, upstream:
            while True:
                try:
                    chunk = client.recv(65536)
                except ConnectionError:    # wrk resets its connections at the end of a slice
                    return
                if not chunk:
                    return
                pending = relay_blocking(pending + chunk, upstream, client)

    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


def relay_parked(port: int, origin_port: int) -> None:
    """The node's own shape: one loop thread parks idle client connections in epoll (one-shot); a
    readable one goes through a queue to a pool thread, which serves its request with blocking
    sockets over the connection's kept-alive origin connection and parks it again."""
    epoll = select.epoll()
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    epoll.register(listener.fileno(), select.EPOLLIN)
    conns: dict = {}   # client fd -> [client, upstream, bytes read past the last request]
    ready: queue.SimpleQueue = queue.SimpleQueue()

    def serve() -> None:
        while True:
            fd = ready.get()
            state = conns[fd]
            client, upstream = state[0], state[1]
            try:
                chunk = client.recv(65536)
            except ConnectionError:    # wrk resets its connections at the end of a slice
                chunk = b""
            if not chunk:
                del conns[fd]
                client.close()
                upstream.close()
                continue
            state[2] = relay_blocking(state[2] + chunk, upstream, client)
            epoll.modify(fd, select.EPOLLIN | select.EPOLLONESHOT)

    for _ in range(32):
        threading.Thread(target=serve, daemon=True).start()
    while True:
        for fd, _ in epoll.poll():
            if fd != listener.fileno():
                ready.put(fd)
                continue
            while True:
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    break
                client.setblocking(True)
                conns[client.fileno()] = [client, socket.create_connection(("127.0.0.1", origin_port)), b""]
                epoll.register(client.fileno(), select.EPOLLIN | select.EPOLLONESHOT)


def relay_epoll(port: int, origin_port: int) -> None:
    """One thread: every client and origin socket non-blocking on one selector."""
    selector = selectors.DefaultSelector()
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ, None)

    class Pair:
        def __init__(self, client):
            self.client, self.pending, self.answer, self.busy, self.closed = client, b"", b"", False, False
            self.upstream = socket.create_connection(("127.0.0.1", origin_port))
            self.upstream.setblocking(False)
            client.setblocking(False)

        def next_request(self):
            if not self.busy and b"\r\n\r\n" in self.pending:
                self.pending = self.pending[self.pending.index(b"\r\n\r\n") + 4:]
                self.busy = True
                self.upstream.send(UPSTREAM_REQUEST)

    while True:
        for key, _ in selector.select():
            if key.data is None:
                client, _ = listener.accept()
                pair = Pair(client)
                selector.register(client, selectors.EVENT_READ, (pair, True))
                selector.register(pair.upstream, selectors.EVENT_READ, (pair, False))
                continue
            pair, from_client = key.data
            if pair.closed:     # closed by an earlier event of this same batch
                continue
            if from_client:
                try:
                    chunk = pair.client.recv(65536)
                except ConnectionError:    # wrk resets its connections at the end of a slice
                    chunk = b""
                if not chunk:
                    selector.unregister(pair.client)
                    selector.unregister(pair.upstream)
                    pair.client.close()
                    pair.upstream.close()
                    pair.closed = True
                    continue
                pair.pending += chunk
            else:
                pair.answer += pair.upstream.recv(65536)
                end = answer_end(pair.answer)
                if end < 0:
                    continue
                pair.client.setblocking(True)   # 10 KB fits the socket buffer; never waits here
                pair.client.sendall(pair.answer[:end])
                pair.client.setblocking(False)
                pair.answer, pair.busy = pair.answer[end:], False
            pair.next_request()


def start_relay(kind: str, origin_port: int) -> tuple:
    """A relay of `kind` in a process of its own; (pid, port)."""
    port = free_port()
    proc = _spawn([sys.executable, os.path.abspath(__file__), "--relay", kind, str(port), str(origin_port)])
    wait_http(port, "/nostore/obj.bin", time.monotonic() + 10, proc)
    return proc.pid, port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per run (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved slices per run (default 3)")
    parser.add_argument("--relay", nargs=3, metavar=("KIND", "PORT", "ORIGIN_PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay:
        kind, port, origin_port = args.relay
        {"epoll": relay_epoll, "threads": relay_threads, "parked": relay_parked}[kind](int(port), int(origin_port))
        return 0
    install_cleanup()
    body = os.urandom(SIZE)
    load_before = loadavg()
    origin_port, nginx_pid, nginx_port, daemon, _ = start_proxies(body)
    relays = {kind: start_relay(kind, origin_port) for kind in ("epoll", "threads", "parked")}
    check_answers(nginx_port, ("/miss/obj.bin",), None, body, "X-Cache-Status")
    check_answers(daemon.public_port, ("/miss/obj.bin",), {"Host": HOST}, body, "X-Cache")
    for _pid, port in relays.values():
        check_answers(port, ("/miss/obj.bin",), None, body, "Content-Length")
    cells = {
        "nginx_miss_c32": (nginx_pid, nginx_port, "/miss/obj.bin", None, 32),
        "node_miss_c32": (daemon.pid, daemon.public_port, "/miss/obj.bin", {"Host": HOST}, 32),
        **{f"relay_{kind}_c32": (pid, port, "/miss/obj.bin", None, 32) for kind, (pid, port) in relays.items()},
    }
    figures = run_cells(cells, args.duration, args.rounds)
    print_figures(figures, f"10 KB no-store answer, keep-alive, wrk -t1; {args.duration:g} s per run in "
                           f"{args.rounds} interleaved slices; origin: nginx static", load_before, loadavg())
    nginx = figures["nginx_miss_c32"]
    for name in cells:
        if name != "nginx_miss_c32":
            print(f"{name:<18} / nginx: requests/s {figures[name]['rps'] / nginx['rps']:.1%}, "
                  f"CPU per request {figures[name]['cpu_us'] / nginx['cpu_us']:.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
