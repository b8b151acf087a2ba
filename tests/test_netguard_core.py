"""netguard on its own (docs/ARCHITECTURE.md, "Trust boundaries"): total deadlines against peers that trickle,
request targets that http.client would refuse (and echo), the admin port on
every local address, metadata addresses hidden inside IPv6 ones."""

import socket
import threading
import time

import pytest

from contentnode.core import netguard, s3, s3_errors, s3_records
from contentnode.core.notify_transport import DeliveryError, send_email, send_telegram

POLICY = netguard.OutboundPolicy()


class RawServer:
    """A loopback TCP server running `script(conn, request_bytes)` for each connection."""

    def __init__(self, script):
        self.script = script
        self.requests = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            try:
                self.script(conn, self)
            except OSError:
                pass

    def read_request(self, conn) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        self.requests.append(data)
        return data

    def close(self):
        self.sock.close()


@pytest.fixture
def server_factory():
    servers = []

    def make(script):
        server = RawServer(script)
        servers.append(server)
        return server
    yield make
    for server in servers:
        server.close()


def trickle(data: bytes, every: float = 0.2):
    def send(conn):
        for byte in data:
            conn.sendall(bytes([byte]))
            time.sleep(every)
    return send


def test_fetch_total_timeout_holds_against_a_trickling_body(server_factory):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n")
        trickle(b"x" * 60)(conn)

    server = server_factory(script)
    started = time.monotonic()
    with pytest.raises(netguard.OutboundError) as err:
        netguard.fetch(f"http://127.0.0.1:{server.port}/", POLICY, timeout=1.0)
    assert err.value.step == "timeout"
    assert time.monotonic() - started < 3.0  # each byte beats the socket timeout; the total must not


def test_fetch_total_timeout_holds_against_trickling_headers(server_factory):
    def script(conn, server):
        server.read_request(conn)
        trickle(b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 60 + b"\r\n\r\n")(conn)

    server = server_factory(script)
    started = time.monotonic()
    with pytest.raises(netguard.OutboundError) as err:
        netguard.fetch(f"http://127.0.0.1:{server.port}/", POLICY, timeout=1.0)
    assert err.value.step == "timeout"
    assert time.monotonic() - started < 3.0


def _answer_ok(conn, server):
    server.read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")


def test_fetch_encodes_spaces_controls_and_non_ascii_in_the_target(server_factory):
    server = server_factory(_answer_ok)
    result = netguard.fetch(f"http://127.0.0.1:{server.port}/a b/\u00e9\x01?q=x y", POLICY)
    assert result.status == 200
    request_line = server.requests[0].split(b"\r\n")[0]
    assert request_line == b"GET /a%20b/%C3%A9%01?q=x%20y HTTP/1.1"


def test_a_content_length_of_odd_digits_is_not_a_crash(server_factory):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\nConnection: close\r\n\r\nab")

    server = server_factory(script)
    try:
        netguard.fetch(f"http://127.0.0.1:{server.port}/", POLICY)
    except netguard.OutboundError:
        pass  # refused cleanly is fine; a ValueError (a 500 upstairs) is not


def test_telegram_errors_never_repeat_the_bot_token(server_factory):
    token = "4242:" + "S" * 35

    def script(conn, server):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnope!")

    server = server_factory(script)
    cfg = {"bot_token": token, "chat_id": "42", "api_url": f"http://127.0.0.1:{server.port}/a b"}
    with pytest.raises(DeliveryError) as err:
        send_telegram(cfg, "hello", POLICY, timeout=5)
    assert token not in str(err.value)
    assert b"/a%20b/bot" in server.requests[0]


def _local_non_loopback_address():
    """This machine's address on its default route (a UDP connect sends nothing)."""
    for family, target in ((socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))):
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(target)
                address = probe.getsockname()[0]
        except OSError:
            continue
        if not address.startswith("127.") and address != "::1":
            return address
    return None


def test_the_admin_port_is_refused_on_every_local_address():
    policy = netguard.OutboundPolicy(admin_ports=frozenset({9090}))
    for address in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1", _local_non_loopback_address()):
        if address is None:
            continue
        with pytest.raises(netguard.OutboundError) as err:
            netguard.vet_address(address, 9090, policy)
        assert "admin port" in err.value.message, address
        assert netguard.vet_address(address, 9091, policy)  # other ports stay allowed
    # a remote address is no local admin port
    assert netguard.vet_address("198.51.100.7", 9090, policy) == ["198.51.100.7"]


@pytest.mark.parametrize("address", [
    "169.254.169.254", "fe80::1", "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",        # NAT64 of 169.254.169.254
    "2002:a9fe:a9fe::1",         # 6to4 of 169.254.169.254
    "fd00:ec2::254",             # AWS metadata over IPv6
    "100.100.100.200",           # Alibaba Cloud metadata
    "0.0.0.0", "::", "224.0.0.1", "ff02::1",
    "255.255.255.255", "240.0.0.1", "250.1.2.3", "0.1.2.3",  # broadcast, reserved, "this network"
    "::ffff:255.255.255.255",    # the broadcast address mapped into IPv6
])
def test_metadata_link_local_unspecified_and_multicast_are_always_refused(address):
    with pytest.raises(netguard.OutboundError) as err:
        netguard.vet_address(address, 80, POLICY)
    assert err.value.step == "address"


def test_s3_calls_end_at_their_deadline_against_a_trickling_origin(server_factory):
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n")
        trickle(b"X-Slow: " + b"z" * 60 + b"\r\n\r\n")(conn)

    server = server_factory(script)
    config = s3_records.BucketConfig(f"http://127.0.0.1:{server.port}", "us-east-1", "media", "AKID", "secret-key",
                                     path_style=True)
    client = s3.S3Client(config, POLICY, timeout=1.0)
    started = time.monotonic()
    with pytest.raises(s3_errors.S3Error) as err:
        client.head_object("a.txt")
    assert err.value.code == "timeout"
    assert time.monotonic() - started < 3.0


def test_smtp_session_has_a_total_deadline(server_factory):
    def script(conn, server):
        trickle(b"220-" + b"w" * 200 + b"\r\n", every=0.05)(conn)

    server = server_factory(script)
    cfg = {"host": "127.0.0.1", "port": server.port, "security": "none", "from": "a@example.com",
           "to": ["b@example.com"]}
    started = time.monotonic()
    with pytest.raises(DeliveryError) as err:
        send_email(cfg, "subject", "text", POLICY, timeout=0.5)  # the session gets 4 x 0.5 s
    assert "did not finish" in str(err.value)
    assert time.monotonic() - started < 5.0


def test_an_endless_smtp_reply_is_cut(server_factory):
    def script(conn, server):
        line = b"220-" + b"v" * 1000 + b"\r\n"
        while True:
            conn.sendall(line * 64)

    server = server_factory(script)
    cfg = {"host": "127.0.0.1", "port": server.port, "security": "none", "from": "a@example.com",
           "to": ["b@example.com"]}
    with pytest.raises(DeliveryError) as err:
        send_email(cfg, "subject", "text", POLICY, timeout=5)
    assert "longer than" in str(err.value) or "did not finish" in str(err.value)


def test_a_non_ascii_smtp_password_is_a_clear_refusal_that_quotes_no_character(server_factory):
    def script(conn, server):
        conn.sendall(b"220 hello\r\n")
        file = conn.makefile("rb")
        while line := file.readline():
            if line.upper().startswith(b"EHLO"):
                conn.sendall(b"250-hi\r\n250 AUTH PLAIN LOGIN\r\n")
            elif line.upper().startswith(b"QUIT"):
                conn.sendall(b"221 bye\r\n")
                return
            else:
                conn.sendall(b"500 no\r\n")

    server = server_factory(script)
    cfg = {"host": "127.0.0.1", "port": server.port, "security": "none", "from": "a@example.com",
           "to": ["b@example.com"], "username": "mailer", "password": "p\u00e4ssw\u00f6rd-s3cret"}
    with pytest.raises(DeliveryError) as err:
        send_email(cfg, "subject", "text", POLICY, timeout=5)
    assert "non-ASCII" in str(err.value)
    assert "\u00e4" not in str(err.value) and "\\xe4" not in str(err.value)


@pytest.mark.parametrize("length, refused", [("0", False), ("5", False), ("9" * 4301, True), ("99999999", True)])
def test_declared_lengths_of_any_size_are_judged_without_a_crash(server_factory, length, refused):
    """A zero length is no reason to refuse; 4,301 digits is no reason to crash."""
    def script(conn, server):
        server.read_request(conn)
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n".encode()
                     + b"x" * min(5, int(length[:3])))
    server = server_factory(script)
    if refused:
        with pytest.raises(netguard.OutboundError) as err:
            netguard.fetch(f"http://127.0.0.1:{server.port}/", POLICY, timeout=5, max_bytes=65536)
        assert err.value.step == "response"
    else:
        assert netguard.fetch(f"http://127.0.0.1:{server.port}/", POLICY, timeout=5, max_bytes=65536).status == 200


def test_connecting_to_no_address_is_an_outbound_error():
    """Once `raise None` (a TypeError) if no address was left to try."""
    with pytest.raises(netguard.OutboundError) as err:
        netguard._connect_any([], 80, 1.0)
    assert err.value.step == "connect"
