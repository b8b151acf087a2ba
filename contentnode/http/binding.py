"""Why a listener could not bind, said so an operator can act on it.

BindError is still an OSError (same errno and strerror), so callers that
retry or refuse on OSError (the HTTPS listener) keep working; `explain()`
adds which listener, the address and port, and the likely fix.
"""

import errno
import http.client

PROBE_TIMEOUT = 1.0


class BindError(OSError):
    def __init__(self, listener: str, address: str, port: int, cause: OSError):
        super().__init__(cause.errno, cause.strerror)
        self.listener = listener
        self.address = address
        self.port = port

    def __str__(self) -> str:
        return self.explain()

    def explain(self) -> str:
        where = f"the {self.listener} listener cannot bind {self.address} port {self.port}"
        if self.errno == errno.EADDRINUSE:
            holder = ("another contentnode answers there (stop it, or give this one other ports)"
                      if contentnode_answers(self.address, self.port) else
                      f"another program holds it (`ss -ltnp 'sport = :{self.port}'` shows which)")
            return f"{where}: the port is in use; {holder}"
        if self.errno == errno.EACCES:
            return (f"{where}: permission denied; ports below 1024 need root or the "
                    "CAP_NET_BIND_SERVICE capability (the shipped systemd unit grants it), "
                    "or choose a port of 1024 or more")
        if self.errno == errno.EADDRNOTAVAIL:
            return f"{where}: {self.address} is not an address of this machine; check the bind setting"
        return f"{where}: {self.strerror}"


def contentnode_answers(address: str, port: int) -> bool:
    """True when the process holding the port answers /healthz as a contentnode."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    connection = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().getheader("Server", "").startswith("contentnode")
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
