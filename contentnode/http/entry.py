"""What a listener runs for each request: the Request made, its client named, the port's dispatcher run.

http/server.py calls an Entry with the connection handler of each request. The
client-address policy (core/client_address.py) is handed in as `client_ip`,
so a request goes from the listener straight to its port's dispatcher
(public/ or http/router.py), never through the composition root.
"""

from contentnode.http.request import Request


class Entry:
    """client_ip(peer_ip, headers): the client's address (the peer, or whom a trusted proxy names)."""

    def __init__(self, port_name: str, scheme: str, dispatcher, client_ip):
        self.port_name, self.scheme = port_name, scheme
        self.dispatcher, self.client_ip = dispatcher, client_ip

    def __call__(self, handler):
        req = Request(handler, self.port_name, self.scheme)
        req.client_ip = handler.client_ip = self.client_ip(req.peer_ip, req.headers)  # the access line shows it too
        return self.dispatcher(req)
