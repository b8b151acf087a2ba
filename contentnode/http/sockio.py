"""A connection's rfile and wfile, with the deadlines that follow progress.

CPython's BufferedReader cannot say whether it already holds the next
pipelined request without blocking, and a connection parked with bytes in
its buffer would never wake (the selector sees the socket, not the buffer).
SocketReader can: `buffered()`. Reads and writes never count from a
request's start: on plain TCP the kernel's SO_RCVTIMEO/SO_SNDTIMEO end a
call only when no byte moved for that long (a partial send counts as
progress); on TLS the socket's timeout bounds each read and each record
written (TLS_PIECE), as OpenSSL retries a blocking socket's EAGAIN itself.
A listener's loop thread never waits: on plain TCP its reads and sends pass
MSG_DONTWAIT; a TLS socket (which takes no flags) is put in non-blocking
mode (timeout 0) for the loop's turn, so OpenSSL's WANT_READ/WANT_WRITE
come back as SSLWantReadError/SSLWantWriteError.
"""

import socket
import ssl
import struct

READ_CHUNK = 65536
TLS_PIECE = 16384  # one TLS record: each write of a stalled client waits at most the timeout
_WOULD_WAIT = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def prepare(sock, progress_timeout: float) -> None:
    """Blocking socket, no Nagle delay, and the progress deadline for reads and writes."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if isinstance(sock, ssl.SSLSocket):
        sock.settimeout(progress_timeout)
        return
    sock.settimeout(None)  # no poll() before every read and write: the kernel keeps the deadline
    whole = int(progress_timeout)
    packed = struct.pack("ll", whole, int((progress_timeout - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, packed)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, packed)


class SocketReader:
    """The handler's rfile: readline/read/peek over recv, and how much is already buffered."""

    __slots__ = ("_sock", "_buffer", "_flags", "_tls")

    def __init__(self, sock):
        self._sock = sock
        self._buffer = b""
        self._flags = 0   # MSG_DONTWAIT while a listener's loop thread reads (never_wait)
        self._tls = isinstance(sock, ssl.SSLSocket)   # takes no flags: the loop makes it non-blocking

    def buffered(self) -> int:
        return len(self._buffer)

    def held(self) -> bytes:
        """What is buffered now (a request head whole in it is parsed at once: http/request_head.py)."""
        return self._buffer

    def never_wait(self, on: bool) -> None:
        """On a listener's loop thread a read that would wait fails as if the client had stalled
        (it reads a head already whole in the buffer, so it never should). A TLS socket is made
        non-blocking by the listener instead."""
        self._flags = socket.MSG_DONTWAIT if on and not self._tls else 0

    def _fill(self) -> bool:
        try:
            data = self._sock.recv(READ_CHUNK, self._flags)
        except _WOULD_WAIT:  # SO_RCVTIMEO: no byte came for the whole progress deadline (or the loop's turn)
            raise TimeoutError("the client sent nothing for too long") from None
        if not data:
            return False
        self._buffer = self._buffer + data if self._buffer else data
        return True

    def fill_nowait(self) -> bool:
        """Take what has arrived without waiting (a plain socket, or a TLS one in non-blocking mode);
        False at end of stream or when the connection failed."""
        try:
            data = self._sock.recv(READ_CHUNK) if self._tls else self._sock.recv(READ_CHUNK, socket.MSG_DONTWAIT)
        except _WOULD_WAIT:
            return True
        except OSError:   # reset, or a TLS record that does not decrypt
            return False
        if not data:
            return False
        self._buffer = self._buffer + data if self._buffer else data
        return True

    def holds_head(self, limit: int) -> bool:
        """A whole request head is buffered (it ends at an empty line), or more than `limit` bytes."""
        return b"\n\r\n" in self._buffer or b"\n\n" in self._buffer or len(self._buffer) > limit

    def skip(self, size: int) -> None:
        self._buffer = self._buffer[size:]

    def peek(self, size: int = 1) -> bytes:
        if not self._buffer:
            self._fill()
        return self._buffer

    def readline(self, limit: int = -1) -> bytes:
        start = 0
        while True:
            end = self._buffer.find(b"\n", start)
            if end >= 0 and (limit < 0 or end < limit):
                cut = end + 1
                break
            if 0 <= limit <= len(self._buffer):
                cut = limit
                break
            start = len(self._buffer)
            if not self._fill():
                cut = len(self._buffer)
                break
        line, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return line

    def read(self, size: int) -> bytes:
        if len(self._buffer) >= size:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
            return data
        parts, have = [self._buffer], len(self._buffer)
        self._buffer = b""
        while have < size:
            try:
                data = self._sock.recv(min(READ_CHUNK, size - have))
            except _WOULD_WAIT:
                raise TimeoutError("the client sent nothing for too long") from None
            if not data:
                break
            parts.append(data)
            have += len(data)
        return b"".join(parts)


class QueuedWriter:
    """The wfile of a request a listener's loop thread answers: it sends what the socket takes at
    once and keeps the rest (`unsent`) for a pool thread to send under the progress deadline.

    Over TLS it writes one record (TLS_PIECE) at a time. OpenSSL writes a record whole or answers
    WANT_WRITE having kept it, and must then be called again with the same bytes: `unsent` starts
    with that record, and SocketWriter cuts it into the same pieces, so the pool's first write is it.
    """

    __slots__ = ("_sock", "_tls", "unsent")

    def __init__(self, sock):
        self._sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)
        self.unsent = b""

    def write(self, data) -> int:
        size = len(data)
        if not self.unsent:
            sent = self._send_tls(data) if self._tls else self._send(data)
            if sent == size:
                return size
            data = data[sent:]
        self.unsent += bytes(data)
        return size

    def _send(self, data) -> int:
        try:
            return self._sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def _send_tls(self, data) -> int:
        view, sent = memoryview(data), 0
        try:
            while sent < len(view):
                sent += self._sock.send(view[sent:sent + TLS_PIECE])
        except _WOULD_WAIT:
            pass
        return sent


class SocketWriter:
    """The handler's wfile: every write sends everything, never a partial write."""

    __slots__ = ("_sock", "_tls")

    def __init__(self, sock):
        self._sock = sock
        self._tls = isinstance(sock, ssl.SSLSocket)

    def write(self, data) -> int:
        if not self._tls or len(data) <= TLS_PIECE:
            self._sock.sendall(data)
            return len(data)
        view = memoryview(data)
        for start in range(0, len(view), TLS_PIECE):
            self._sock.sendall(view[start:start + TLS_PIECE])
        return len(data)

    def flush(self) -> None:
        """Nothing is held back (http.server's finish() calls this)."""

    def close(self) -> None:
        """The socket is closed by the server, not by its writer."""
