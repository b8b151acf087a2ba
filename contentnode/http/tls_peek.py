"""Whether a new TLS connection's first record (the ClientHello) is whole, peeked.

The public listeners (http/parking.py) run a TLS handshake on a pool thread
only once the ClientHello is in the kernel's buffer: a client that sends a
few bytes of it then stops holds no thread, only a parked socket that the
loop peeks at again on each sweep and closes at header_timeout.
"""

import socket

TLS_RECORD_MAX = 5 + (1 << 14) + 2048   # header and the largest record a peer may send (RFC 8446 5.2)


def first_record(sock) -> str:
    """'whole' when the first TLS record is in the kernel's buffer (or the bytes are no TLS record:
    the handshake refuses them at once), 'partial' while it is coming, 'gone' at end of stream."""
    try:
        data = sock.recv(TLS_RECORD_MAX, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return "partial"
    except OSError:
        return "gone"
    if not data:
        return "gone"
    if len(data) < 5:
        return "partial"
    return "whole" if data[0] != 0x16 or len(data) >= 5 + int.from_bytes(data[3:5], "big") else "partial"
