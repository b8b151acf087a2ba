"""What a listener runs for each request: the Request made, its client named, the port's dispatcher run.

http/server.py calls an Entry with the connection handler of each request. The
client-address policy (core/client_address.py) is handed in as `client_ip`,
so a request goes from the listener straight to its port's dispatcher
(public/ or http/router.py), never through the composition root. A dispatcher
that can give some answers again without running (the public port's prepared
answers, public/prepared.py) is asked first, by `again(handler, port_name)`,
before any Request is made, but not for a request the listener's loop thread
deferred (http/parking.py): it was asked there, and its pool thread hands the
Request the loop thread made, its client named again, to the dispatcher's
`resume`, which goes on from the stage that deferred it, or from the start
when the state changed meanwhile (only the public dispatcher's requests can be).
"""

from contentnode.http.request import Request


class Entry:
    """client_ip(peer_ip, headers): the client's address (the peer, or whom a trusted proxy names);
    follow(): in a public worker, the state file read again if the daemon wrote it, before anything
    of a request is decided (its client's address by the trusted proxies included)."""

    def __init__(self, port_name: str, scheme: str, dispatcher, client_ip, again=None, follow=None):
        self.port_name, self.scheme = port_name, scheme
        self.dispatcher, self.client_ip, self.again, self.follow = dispatcher, client_ip, again, follow

    def __call__(self, handler):
        if self.follow is not None:
            self.follow()   # read your writes: the daemon may have changed the state file
        handler.client_ip = self.client_ip(handler.client_address[0], handler.headers)   # the access line shows it
        deferred = handler.deferred_request
        if deferred is not None:   # named again: the settings may have changed while it waited
            deferred.client_ip = handler.client_ip
            return self.dispatcher.resume(deferred)
        if self.again is not None:
            response = self.again(handler, self.port_name)
            if response is not None:
                return response
        req = Request(handler, self.port_name, self.scheme)
        req.client_ip = handler.client_ip
        return self.dispatcher(req)
