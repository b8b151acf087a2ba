"""What the tests' small stand-ins share: a loopback HTTP server skeleton, a quiet
request handler with a one-call reply, and a loopback TCP listener."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with `reply`."""

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type=None):
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class LoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 (port 0: one the OS picks), serving
    `handler` from a daemon thread until stop(); https with `ssl_context`."""

    def __init__(self, handler, port=0, name=None, poll_interval=0.5, ssl_context=None):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        if ssl_context is not None:
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": poll_interval},
                         name=name, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class PeerServer:
    """What the HTTP stand-ins share: their LoopbackServer (`_server`, made by
    start()), its URL, and use in a with statement."""

    _server: LoopbackServer | None = None

    @property
    def url(self):
        return self._server.url

    def stop(self):
        if self._server:
            self._server.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class LoopbackListener:
    """A TCP listener on 127.0.0.1 (a port the OS picks) that hands every accepted
    connection to `handle(conn)` in a daemon thread of its own, until close()."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn):
        raise NotImplementedError

    def close(self):
        self.listener.close()
