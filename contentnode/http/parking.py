"""The public listeners' shape: Apache's event MPM inside a ThreadingHTTPServer.

A thread per connection holds 30 KB and a GIL turn for every connection,
idle or not. Here one loop thread per listener owns an epoll set: it accepts,
parks every connection that waits for its next request (no thread, no
request state: the socket and an empty read buffer), and hands a connection
to a bounded pool of threads only when it has bytes to read. The pool thread
reads the head (header_timeout), serves the request, answers (send_timeout,
progress only) and serves a pipelined request already buffered, then parks
the connection again (EPOLLONESHOT: re-armed by the thread that parks it).
The loop thread reads what has arrived itself, parks a head not yet whole,
and answers the requests that need no wait (a hit held in memory, /healthz, a
refusal: _serve_inline), so the common hit costs no handoff between threads;
the others it hands to the pool. Over TLS it does so once the handshake is
done (in the pool), with the socket in non-blocking mode for its turn.

- A new connection that sends nothing is closed after header_timeout, a
  parked keep-alive one after idle_timeout. TLS handshakes run in the pool,
  under the watchdog, once the first TLS record (the ClientHello) is whole in
  the kernel's buffer (peeked): until then the connection waits unarmed in
  _hellos and the loop's sweep peeks again, so a client sending a few bytes of
  a ClientHello holds no thread.
- When the listener runs short of slots (max_connections) it closes the
  longest-idle parked connection instead of refusing the new client.
- One client address holds at most max_requests_per_client pool threads: its
  other connections with a request to serve wait, parked and unarmed, and are
  handed on in arrival order as its served ones end (slow readers from a few
  addresses cannot hold every thread).
- One client address holds at most max_connections_per_client connections;
  more are refused at accept (503 on plain HTTP, a close on TLS), after the
  events already waiting are handled, so connections that client has closed
  (a load tool ending a run, a page left) stop counting first; the same for
  its connections waiting for a pool thread, which are then dropped rather
  than served once their peer is gone (closed, reset, or its sending side
  shut). A peer that
  is a trusted proxy (`uncapped`) is not counted: its clients only differ in
  X-Forwarded-For, which comes with each request. IPv6 clients count per /64.
- Bytes buffered in unfinished heads (parked in _heads) have one budget per
  listener and process (head_budget):
  past it, the connections with the oldest unfinished heads are closed.
- A connection is never parked with bytes it already read: the SocketReader's
  buffer and, on TLS, what OpenSSL has decrypted (pending()) are served first.

This module keeps the loop and the parking; the pool of threads is
http/pool.py, a connection's own state http/held_connection.py, the caps
per client http/client_shares.py, the ClientHello peek http/tls_peek.py and
the open files limit http/open_files.py.
"""

import collections
import errno
import heapq
import itertools
import logging
import select
import threading
import time

from contentnode.http.client_shares import ClientShares, client_key
from contentnode.http.held_connection import Connection, peer_gone
from contentnode.http.connection import MAX_HEAD, RequestHandler
from contentnode.http.open_files import OWN_FDS, ensure_open_files
from contentnode.http.pool import Pool
from contentnode.http.server import Server, _shutdown, overloaded_answer
from contentnode.http.request import Deferred
from contentnode.http.sockio import QueuedWriter, SocketReader, SocketWriter, prepare
from contentnode.http.tls_peek import first_record

log = logging.getLogger("contentnode.http")

ACCEPT_BATCH = 64          # connections accepted per loop turn, so parked ones are not starved
SWEEP_SECONDS = 0.25       # deadlines of parked connections are kept this closely
CATCH_UP_ROUNDS = 2        # before refusing a client at its cap: a closed connection may first need its last answer sent
INLINE_TURNS = 16          # pipelined requests of one connection the loop thread answers before the pool does
_ARMED = select.EPOLLIN | select.EPOLLONESHOT


class ParkingServer(Server):
    """A public listener (plain or TLS): parked idle connections, a bounded pool of threads."""

    request_queue_size = 4096   # the kernel caps it at net.core.somaxconn

    def __init__(self, address, dispatch, name: str, max_connections: int = 16384,
                 header_timeout: float = 10.0, idle_timeout: float = 60.0, send_timeout: float = 60.0,
                 threads: int = 128, per_client: int = 64, requests_per_client: int = 8, head_budget: int = 32 << 20,
                 uncapped=None,
                 tls_context=None, on_request=None, sock=None, headers=()):
        super().__init__(address, dispatch, name, max_connections=max_connections,
                         header_timeout=header_timeout, idle_timeout=idle_timeout, send_timeout=send_timeout,
                         on_request=on_request, sock=sock, headers=headers)
        self.tls_context = tls_context
        self._shares = ClientShares(per_client, requests_per_client, uncapped)   # the caps per client
        self.head_budget = head_budget
        self._head_bytes = 0   # buffered by the connections in _heads
        self._fresh: collections.OrderedDict[int, Connection] = collections.OrderedDict()
        self._idle: collections.OrderedDict[int, Connection] = collections.OrderedDict()
        self._heads: collections.OrderedDict[int, Connection] = collections.OrderedDict()   # waiting for the rest of a head
        self._hellos: collections.OrderedDict[int, Connection] = collections.OrderedDict()  # first TLS record not whole
        self._head_deadlines: list = []   # heap of (head_due, sequence, connection); stale ones skipped
        self._sequence = itertools.count()
        self._open = 0
        self._epoll = select.epoll()
        self._pool = Pool(threads, self._serve, name)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        ensure_open_files(max_connections + OWN_FDS)

    # --- the loop thread ----------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        with self._lock:
            if self.closing:
                return
            self._serving = True
        self.watchdog.start()
        self.socket.setblocking(False)   # the loop accepts until EAGAIN
        listening = self.socket.fileno()
        # EPOLLEXCLUSIVE: with public workers, one process is woken per new connection, not all
        self._epoll.register(listening, select.EPOLLIN | select.EPOLLEXCLUSIVE)
        wait = min(poll_interval, SWEEP_SECONDS)
        try:
            while not self._stop.is_set():
                pending = False
                for fd, _ in self._epoll.poll(wait):
                    if fd == listening:
                        pending = True
                    else:
                        self._wake(fd)
                if pending:   # after the wake-ups: a descriptor closed below is never one of them
                    self._accept()
                self._expire(time.monotonic())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def _wake(self, fd: int) -> None:
        with self._lock:
            conn = self._idle.pop(fd, None) or self._fresh.pop(fd, None) or self._heads.pop(fd, None)
            if conn is None:   # closed meanwhile (evicted, expired)
                return
            if conn.held:
                self._unhold_locked(conn)
            if self.tls_context is not None and conn.rfile is None and first_record(conn.sock) == "partial":
                self._hellos[fd] = conn   # unarmed: the sweep looks again
                return
            inline = conn.client not in self._shares.waiting and (self.tls_context is None or conn.rfile is not None)
        try:
            if inline and self._serve_inline(conn):
                return
        except Exception:
            log.exception("%s: connection from %s failed", self.name, conn.address[0])
            with self._lock:
                self._park_or_close_locked(conn, park=False)
            return
        with self._lock:
            if not self._shares.take_thread(conn):
                self._shares.wait(conn)
                return
        self._pool.submit(conn)

    def _serve_inline(self, conn: Connection) -> bool:
        """On the loop thread: answer the requests whose whole head is here and whose answer
        needs no wait (a hit held in memory, a refusal, /healthz), sent without waiting, then
        park the connection or close it (a head not whole yet is parked for the rest): no pool
        thread, no handoff between threads. False hands the connection to the pool: a request
        that may wait (Request.may_wait: its parsed head goes along, `deferred`), an answer the socket did not
        take whole (`unsent`), or pipelined requests past INLINE_TURNS. A TLS connection comes
        here handshaken; its socket stays non-blocking until a pool thread takes it (_serve)."""
        tls = self.tls_context is not None
        if conn.rfile is None:
            prepare(conn.sock, self.send_timeout)
            conn.rfile, conn.wfile = SocketReader(conn.sock), SocketWriter(conn.sock)
        elif tls and conn.sock.gettimeout() != 0:
            conn.sock.settimeout(0)
        reader = conn.rfile
        for _ in range(INLINE_TURNS):
            if not self._head_here(conn, inline=True):   # parked again for the rest of its head, under header_timeout
                with self._lock:
                    self._park_or_close_locked(conn, park=True)
                return True
            writer = QueuedWriter(conn.sock)
            handler = RequestHandler.for_turn(self, conn.sock, conn.address, reader, writer)
            handler.inline = True
            reader.never_wait(True)
            try:
                handler.handle_one_request()
            except Deferred:
                conn.deferred = handler   # its head parsed and consumed: a pool thread serves it (_serve)
                return False
            finally:
                reader.never_wait(False)
            conn.fresh = False
            close = handler.close_connection or self.closing
            if writer.unsent:
                conn.unsent, conn.then_close = writer.unsent, close
                return False
            if close or not (reader.buffered() or tls and conn.sock.pending()):   # conn.holds_bytes()
                with self._lock:
                    self._park_or_close_locked(conn, park=not close)
                return True
        return False

    def _sweep_hellos_locked(self, now: float) -> list[Connection]:
        """Close first records late or abandoned; the ones now whole, to hand to the pool."""
        ready = []
        for fd, conn in list(self._hellos.items()):
            state = first_record(conn.sock)
            if state == "partial" and conn.since + self.header_timeout > now:
                continue
            del self._hellos[fd]
            if state != "whole":
                self._close_locked(conn)
            elif self._shares.take_thread(conn):
                ready.append(conn)
            else:
                self._shares.wait(conn)
        return ready

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return   # another process took it, or none left
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._out_of_descriptors()
                elif exc.errno not in (errno.ECONNABORTED, errno.EPROTO):
                    log.warning("%s: accept failed: %s", self.name, exc)
                return
            self._admit(sock, address)

    def _admit(self, sock, address) -> None:
        ip, client = address[0], client_key(address[0])
        if self._shares.full(client, ip):   # read unlocked: only the loop thread opens connections
            self._catch_up()
            with self._lock:
                self._drop_gone_locked(client)
        with self._lock:
            if self.closing:
                refusal = "closing"
            elif self._shares.full(client, ip):
                refusal = "client"
            elif self._open >= self.max_connections and not self._evict_locked():
                refusal = "overloaded"
            else:
                refusal = None
                self._open += 1
                self._shares.opened(client)
                conn = Connection(sock, address, time.monotonic())
                self._fresh[sock.fileno()] = conn
                self._epoll.register(sock.fileno(), _ARMED)
        if refusal is not None:
            self._refuse(sock, refusal)

    def _catch_up(self) -> None:
        """Handle the events already waiting on parked connections, as the next loop turn would:
        the ones whose client closed them are closed and stop counting against its cap. A second
        round takes the ones that still had a request to answer before their end was seen. Only
        a client at its cap pays this; what it does is work the loop owes anyway."""
        listening = self.socket.fileno()
        for _ in range(CATCH_UP_ROUNDS):
            ready = [fd for fd, _ in self._epoll.poll(0) if fd != listening]
            if not ready:
                return
            for fd in ready:
                self._wake(fd)

    def _drop_gone_locked(self, client: str) -> None:
        """Close the client's connections waiting for a pool thread whose peer is gone (a request
        nobody will read the answer to: an origin asked for nothing, and a slot held)."""
        for conn in self._shares.drop_gone(client, peer_gone):
            self._close_locked(conn)

    def _refuse(self, sock, why: str) -> None:
        """A short answer that never blocks the loop (plain HTTP only), then close."""
        if self.tls_context is None and why != "closing":
            try:
                sock.setblocking(False)
                sock.send(overloaded_answer(self.headers, "too many connections from this address"
                                            if why == "client" else "too many connections"))
            except OSError:
                pass
        sock.close()

    def _evict_locked(self) -> bool:
        """Close the longest-idle parked connection (kept-alive first, then silent new ones)."""
        for table in (self._idle, self._fresh, self._hellos, self._heads):
            if table:
                _, conn = table.popitem(last=False)
                self._close_locked(conn)
                return True
        return False

    def _out_of_descriptors(self) -> None:
        with self._lock:
            freed = self._evict_locked()
        if not freed:   # nothing parked to give up: wait rather than spin on a readable listener
            log.warning("%s: out of file descriptors with every connection busy", self.name)
            time.sleep(SWEEP_SECONDS)

    def _expire(self, now: float) -> None:
        with self._lock:
            ready = self._sweep_hellos_locked(now) if self._hellos else []
            for table, wait in ((self._fresh, self.header_timeout), (self._idle, self.idle_timeout)):
                while table:
                    fd = next(iter(table))
                    if table[fd].since + wait > now:
                        break
                    self._close_locked(table.pop(fd))
            deadlines = self._head_deadlines
            while deadlines and deadlines[0][0] <= now:
                due, _, conn = heapq.heappop(deadlines)
                fd = conn.sock.fileno()
                if conn.head_due == due and self._heads.get(fd) is conn:   # else: done, or being served
                    self._close_locked(self._heads.pop(fd))
        for conn in ready:
            self._pool.submit(conn)

    def _unhold_locked(self, conn: Connection) -> None:
        self._head_bytes -= conn.held
        conn.held = 0

    def _close_locked(self, conn: Connection) -> None:
        """Forget and close a connection; the caller holds the lock."""
        self._unhold_locked(conn)
        conn.rfile = conn.wfile = conn.deferred = None   # the heap of head deadlines may keep `conn` a while
        self._open -= 1
        self._shares.closed(conn.client)
        try:
            conn.sock.close()
        except OSError:
            pass

    # --- a pool thread --------------------------------------------------------------

    def _serve(self, conn: Connection) -> None:
        """Serve what the connection has, then park it again or close it."""
        try:
            if conn.sock.gettimeout() == 0:   # TLS, after the loop thread's turn: progress deadlines again
                conn.sock.settimeout(self.send_timeout)
            if conn.unsent:
                if not self._send_unsent(conn):
                    self._finish(conn, park=False)
                    return
                if self.tls_context is not None and not conn.holds_bytes():
                    self._finish(conn, park=True)   # no read waits here for a next request
                    return
            if conn.rfile is None:
                if not self._open_connection(conn):
                    self._finish(conn, park=False)
                    return
                if self.tls_context is not None and not conn.holds_bytes():
                    self._finish(conn, park=True)   # handshake done, the request not yet here
                    return
            while True:
                handler, conn.deferred = conn.deferred, None
                if handler is not None:
                    handler.resume(conn.wfile)   # parsed by the loop thread, which found it may wait
                elif not self._head_here(conn):
                    self._finish(conn, park=True)   # the rest of the head has not come yet
                    return
                else:
                    handler = RequestHandler.for_turn(self, conn.sock, conn.address, conn.rfile, conn.wfile)
                    handler.handle_one_request()
                conn.fresh = False
                if handler.close_connection or self.closing:
                    self._finish(conn, park=False)
                    return
                if not conn.holds_bytes():
                    self._finish(conn, park=True)
                    return
        except Exception:
            log.exception("%s: connection from %s failed", self.name, conn.address[0])
            self._finish(conn, park=False)

    @staticmethod
    def _send_unsent(conn: Connection) -> bool:
        """The rest of an answer the loop thread made (blocking sends under the progress deadline;
        over TLS in the same records QueuedWriter cut); False when the connection closes after
        it, or the client went away or stalled."""
        unsent, conn.unsent = conn.unsent, b""
        writer = conn.wfile
        if writer is None:   # closed meanwhile
            return False
        try:
            writer.write(unsent)
        except OSError:
            return False
        return not conn.then_close

    def _head_here(self, conn: Connection, inline: bool = False) -> bool:
        """Take what has arrived without waiting; True when a whole head (or too much, or the end)
        is there to parse, False to park the connection for the rest. No thread ever waits on a
        client trickling its head, except a pool thread over TLS: it reads under the watchdog."""
        if conn.rfile is None or (self.tls_context is not None and not inline):
            return True
        reader = conn.rfile   # never read on while a head is buffered: the buffer stays bounded
        if reader.holds_head(MAX_HEAD) or not reader.fill_nowait() or reader.holds_head(MAX_HEAD):
            conn.head_due = None
            return True
        if not reader.buffered():
            return False   # woken by nothing (a spurious wake-up): wait again as before
        if conn.head_due is None:
            conn.head_due = time.monotonic() + self.header_timeout
            with self._lock:
                heapq.heappush(self._head_deadlines, (conn.head_due, next(self._sequence), conn))
        return False

    def _open_connection(self, conn: Connection) -> bool:
        """Socket options, and the TLS handshake within header_timeout of accept."""
        sock = conn.sock
        if self.tls_context is not None:
            try:
                sock.settimeout(self.header_timeout)
                tls = self.tls_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                conn.sock = tls
                self.watchdog.arm(tls, conn.since + self.header_timeout)
                try:
                    tls.do_handshake()
                finally:
                    self.watchdog.disarm(tls)
            except (OSError, ValueError) as exc:   # ssl.SSLError is an OSError
                log.debug("TLS handshake with %s failed: %s", conn.address[0], exc)
                return False
        prepare(conn.sock, self.send_timeout)
        conn.rfile, conn.wfile = SocketReader(conn.sock), SocketWriter(conn.sock)
        return True

    def _finish(self, conn: Connection, park: bool) -> None:
        with self._lock:
            if conn.client in self._shares.waiting and self._shares.full(conn.client, conn.address[0]):
                self._drop_gone_locked(conn.client)   # at its cap only: a half-close alone is no reason
            following = self._shares.release_thread(conn)
            self._park_or_close_locked(conn, park)
        if following is not None:
            self._pool.submit(following)

    def _park_or_close_locked(self, conn: Connection, park: bool) -> None:
        if not park or self.closing:
            _shutdown(conn.sock)
            self._close_locked(conn)
            return
        conn.since = time.monotonic()
        if conn.head_due is not None and conn.head_due <= conn.since:
            self._close_locked(conn)   # its head is late
            return
        fd = conn.sock.fileno()
        (self._heads if conn.head_due is not None else self._fresh if conn.fresh else self._idle)[fd] = conn
        self._epoll.modify(fd, _ARMED)
        if conn.head_due is not None and conn.rfile is not None:
            conn.held = conn.rfile.buffered()
            self._head_bytes += conn.held
            while self._head_bytes > self.head_budget and self._heads:   # the oldest heads go first
                self._close_locked(self._heads.popitem(last=False)[1])

    # --- what the node asks ---------------------------------------------------------

    def counts(self) -> dict:
        """Connections open, parked and being served, and the pool's threads (bench/, tests)."""
        with self._lock:
            return {"open": self._open,
                    "parked": len(self._fresh) + len(self._idle) + len(self._heads) + len(self._hellos),
                    "busy": self._shares.busy,
                    "threads": self._pool.threads}

    def active_requests(self) -> int:
        with self._lock:
            return self._shares.busy

    def close_gracefully(self, grace: float = 30.0) -> None:
        """Stop accepting, close parked connections, wait for the ones being served."""
        self.stop_accepting()
        with self._lock:
            for table in (self._fresh, self._idle, self._hellos, self._heads):
                while table:
                    self._close_locked(table.popitem()[1])
            for conn in self._shares.drop_waiting():
                self._close_locked(conn)
        deadline = time.monotonic() + grace
        while self.active_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.watchdog.stop()
        self._pool.stop()
        self._epoll.close()
