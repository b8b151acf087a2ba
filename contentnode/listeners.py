"""The node's listening sockets by name (admin, public, https): bound, served and closed here.

build_app makes one Listeners with the collaborators every listener's entry needs (the
request log, the client-address policy, a worker's read of the daemon's writes), so App
starts and stops listeners by name and the TLS runtime (re)starts the HTTPS one at run
time without either holding the other.
"""

import os
import threading

from contentnode import oscalls
from contentnode.config import ADMIN_MAX_CONNECTIONS, Config
from contentnode.http.binding import BindError
from contentnode.http.entry import Entry
from contentnode.http.parking import ParkingServer
from contentnode.http.server import Server


class Listeners:
    """servers: name -> Server, the ones bound now; the HTTPS listener comes and goes at run time.

    on_request: after each answer (the request log); client_ip(peer_ip, headers) and
    trusted_proxy(ip): the client-address policy; follow(): in a public worker, the state
    file read again before each request (None in the daemon)."""

    def __init__(self, config: Config, on_request, client_ip, trusted_proxy, follow=None,
                 worker_slot: int | None = None):
        self.config, self.on_request, self.follow, self.worker_slot = config, on_request, follow, worker_slot
        self.client_ip, self.trusted_proxy = client_ip, trusted_proxy
        self.servers: dict[str, Server] = {}
        self.accept_poll_seconds = 0.25   # how often an accept loop looks for stop(): each stop waits that long

    def port(self, name: str) -> int | None:
        """The port the listener `name` is bound to, or None when it is not bound."""
        server = self.servers.get(name)
        return server.server_address[1] if server is not None else None

    def start_server(self, name: str, bind: str, port: int, dispatcher, tls_context=None,
                     serve: bool = True, sock=None, headers=()) -> Server:
        """Bind (or take `sock`) and, when `serve`, accept on a thread of its own; `headers` go
        on the answers the listener makes itself (parser errors), as the dispatcher's carry them."""
        config = self.config
        limits = dict(header_timeout=config.header_timeout, idle_timeout=config.idle_timeout,
                      send_timeout=config.send_timeout, on_request=self.on_request, sock=sock, headers=headers)
        try:
            again = getattr(dispatcher, "again", None)   # the public dispatchers' prepared answers
            entry = Entry(name, "https" if tls_context else "http", dispatcher, self.client_ip, again, self.follow)
            if name == "admin":
                server = Server((bind, port), entry, name, **limits,
                                max_connections=min(config.max_connections, ADMIN_MAX_CONNECTIONS))
            else:   # the public listeners park idle connections (docs/ARCHITECTURE.md, "Connection handling")
                server = ParkingServer((bind, port), entry, name, **limits, max_connections=config.max_connections,
                                       threads=config.public_threads, per_client=config.max_connections_per_client,
                                       requests_per_client=config.max_requests_per_client,
                                       head_budget=config.max_unfinished_head_bytes,
                                       uncapped=self.trusted_proxy, tls_context=tls_context)
        except OSError as exc:
            raise BindError(name, bind, port, exc) from exc
        if serve:
            cpu = self.public_cpu() if name == "public" else None
            thread = threading.Thread(target=self._accept, args=(server, cpu), name=f"{name}-accept", daemon=True)
            thread.start()
        self.servers[name] = server
        return server

    def _accept(self, server: Server, cpu: int | None) -> None:
        if cpu is not None:  # this thread only; its connection threads inherit it
            oscalls.attempt("sched_setaffinity", "the public port's threads run on any CPU",
                            os.sched_setaffinity, 0, {cpu})
        server.serve_forever(poll_interval=self.accept_poll_seconds)

    def public_cpu(self) -> int | None:
        """The CPU the public port's threads keep to, or None to let the scheduler move them.

        One interpreter runs one thread at a time (the GIL), so spreading a listener's
        threads over several CPUs buys no parallelism, only handoffs between cores:
        bench_content measured a 10 KB hit at 187 us of CPU unpinned and 125 us kept
        to one CPU on 2 CPUs. Public worker N keeps to the Nth allowed CPU (the daemon
        to the first), so workers spread over the CPUs; the admin API, jobs and the
        HTTPS listener are left free.
        """
        if self.config.public_cpu_affinity == "off" or not hasattr(os, "sched_getaffinity"):
            return None  # off, or a system without CPU sets (not Linux)
        allowed = sorted(oscalls.attempt("sched_getaffinity", "the public port's threads run on any CPU",
                                         os.sched_getaffinity, 0) or ())
        if len(allowed) < 2:
            return None
        return allowed[(self.worker_slot or 0) % len(allowed)]

    def stop_server(self, name: str) -> None:
        server = self.servers.pop(name, None)
        if server is not None:
            server.close_gracefully()

    def stop_all(self) -> None:
        """Close every listener (in-flight requests finish)."""
        for name in list(self.servers):
            self.stop_server(name)

    def drain(self) -> None:
        """Every answer from now on carries Connection: close."""
        for server in self.servers.values():
            server.draining = True
