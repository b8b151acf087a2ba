"""A real SMTP server (aiosmtpd) on a free loopback port, plain, STARTTLS or
implicit TLS, with a self-made certificate, optional AUTH, and an inbox the
test can wait on."""

import asyncio
import datetime
import ipaddress
import os
import ssl
import tempfile
import threading
import time
from email import message_from_bytes, policy

try:
    from aiosmtpd.smtp import SMTP, AuthResult
except ImportError as exc:  # a missing peer fails loudly, never skips
    raise RuntimeError("aiosmtpd is required for the SMTP tests: pip install aiosmtpd") from exc

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def make_cert(directory, names=("localhost",), ips=("127.0.0.1",)):
    """A self-signed CA-style certificate for the given names; returns (cert_path, key_path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path = os.path.join(directory, "smtp-cert.pem")
    key_path = os.path.join(directory, "smtp-key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


class _Inbox:
    def __init__(self):
        self.messages = []
        self.cond = threading.Condition()

    async def handle_DATA(self, server, session, envelope):
        msg = message_from_bytes(envelope.original_content or envelope.content, policy=policy.default)
        with self.cond:
            self.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                                  "message": msg, "tls": session.ssl is not None,
                                  "login": session.auth_data.login.decode() if session.authenticated else None})
            self.cond.notify_all()
        return "250 Message accepted for delivery"


class SmtpServer:
    """mode: "none" (plain), "starttls" (STARTTLS required) or "tls" (implicit TLS).

    With `users` ({name: password}) the server requires AUTH (over TLS).
    """

    def __init__(self, mode="none", users=None):
        self.mode = mode
        self.users = users or {}
        self.inbox = _Inbox()
        self._dir = tempfile.mkdtemp(prefix="smtp-peer-")
        self.cert_path, self.key_path = make_cert(self._dir)
        self.host = "127.0.0.1"
        self.port = None
        self._loop = None
        self._server = None
        self._thread = None
        self._sessions = []  # every connection's protocol, closed at stop as a real shutdown would

    def _auth(self, server, session, envelope, mechanism, auth_data):
        ok = self.users.get(getattr(auth_data, "login", b"").decode()) == getattr(auth_data, "password", b"").decode()
        return AuthResult(success=ok, handled=False, auth_data=auth_data)

    def _factory(self):
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(self.cert_path, self.key_path)
        session = SMTP(self.inbox, hostname="mail.test",
                       tls_context=tls if self.mode == "starttls" else None,
                       require_starttls=self.mode == "starttls",
                       auth_required=bool(self.users), auth_require_tls=self.mode != "none",
                       authenticator=self._auth if self.users else None, timeout=30)
        self._sessions.append(session)
        return session

    def start(self):
        ready = threading.Event()
        errors = []

        def run():
            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
            implicit = None
            if self.mode == "tls":
                implicit = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
                implicit.load_cert_chain(self.cert_path, self.key_path)
            try:
                self._server = self._loop.run_until_complete(
                    self._loop.create_server(self._factory, self.host, 0, ssl=implicit))
                self.port = self._server.sockets[0].getsockname()[1]
            except Exception as exc:  # reported to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            self._loop.run_forever()
            self._server.close()
            # Open connections end too: a client mid-QUIT sees the close at once instead
            # of waiting out its timeout on a socket nobody reads any more.
            for session in self._sessions:
                transport = session.transport
                if transport is not None and not transport.is_closing():
                    try:
                        transport.abort()
                    except AttributeError:  # a TLS transport whose connection is already gone
                        pass
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

        self._thread = threading.Thread(target=run, name=f"smtp-{self.mode}", daemon=True)
        self._thread.start()
        if not ready.wait(10) or errors:
            raise RuntimeError(f"SMTP test server did not start: {errors}")
        return self

    def stop(self):
        if self._loop:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)

    def wait_for(self, count=1, timeout=20):
        """Wait (bounded) until `count` messages arrived; return all received so far."""
        deadline = time.monotonic() + timeout
        with self.inbox.cond:
            while len(self.inbox.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} message(s), got {len(self.inbox.messages)} in {timeout}s")
                self.inbox.cond.wait(left)
            return list(self.inbox.messages)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
