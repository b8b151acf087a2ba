"""systemd's readiness protocol (sd_notify) in a few lines of standard library.

Under `Type=notify` systemd names a datagram socket in $NOTIFY_SOCKET and waits
for "READY=1" on it before it calls the unit started, so units ordered after
contentnode start only once both listeners are bound. A name starting with "@"
is in Linux's abstract namespace. Without the variable this does nothing.
"""

import os
import socket


def notify(message: str = "READY=1") -> bool:
    """Send one state line to the service manager; False when none is listening."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    if address[0] == "@":
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(message.encode(), address)
    except OSError:
        return False
    return True
