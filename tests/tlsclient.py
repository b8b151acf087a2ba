"""A TLS client for the node's HTTPS listener: which certificate answers for a name."""

import hashlib
import socket
import ssl


def fetch_over_tls(port: int, host: str, path: str = "/", cadata: str | None = None,
                   context: ssl.SSLContext | None = None) -> tuple:
    """(sha256 fingerprint of the leaf, raw HTTP answer) of GET path with SNI host."""
    if context is None:
        context = ssl.create_default_context(cadata=cadata)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            chunks = []
            while True:
                chunk = tls.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    return hashlib.sha256(der).hexdigest(), b"".join(chunks)
