"""Email over SMTP and Telegram's Bot API (the webhook, ntfy and DeliveryError are in notify_http).

Each send returns the transport's own answer (the SMTP reply, Telegram's
result) or raises DeliveryError with it, so the panel's "send a test" button
can show the operator exactly what the far side said. Both go only to
addresses netguard has vetted, with timeouts, and never put a secret into an
error message.
"""

import json
import smtplib
import socket
import ssl
import time
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from contentnode.core import netguard
from contentnode.core.notify_http import DeliveryError
from contentnode.core.text import json_loads

DEFAULT_TELEGRAM_API = "https://api.telegram.org"
TELEGRAM_TEXT_LIMIT = 4096
SMTP_TOTAL_FACTOR = 4          # a whole SMTP session may take this many single-step timeouts
MAX_SMTP_REPLY = 64 * 1024     # bytes of one (multi-line) SMTP reply


def _pinned_socket(addresses, port, timeout):
    try:
        return netguard._connect_any(addresses, port, timeout)
    except netguard.OutboundError as exc:
        raise DeliveryError(exc.message) from None


class _CappedReplies:
    """The server's side of the connection, refusing an endless reply (smtplib has no cap)."""

    def __init__(self, inner, limit):
        self._inner, self._limit, self.count = inner, limit, 0

    def readline(self, size=-1):
        line = self._inner.readline(size)
        self.count += len(line)
        if self.count > self._limit:
            raise OSError(f"the server's reply is longer than {self._limit} bytes")
        return line

    def close(self):
        self._inner.close()


class _Pinned:
    """Connects to an already vetted address; TLS still verifies the host name.

    The EHLO name is the address literal of our end of the connection, which
    RFC 5321 allows and which needs no DNS lookup of our own name. The whole
    session ends at `deadline` (the watchdog cuts the connection), and each
    reply is capped.
    """

    data_reply = None
    deadline = None
    guard = None

    def _get_socket(self, host, port, timeout):
        self._host = host
        sock = _pinned_socket(self._addresses, port, timeout)
        if self.deadline is not None:
            self.guard = netguard.DEADLINES.arm(sock, self.deadline)
        address = sock.getsockname()[0]
        self.local_hostname = f"[IPv6:{address}]" if ":" in address else f"[{address}]"
        return self._wrap(sock)

    def getreply(self):
        if self.file is None and self.sock is not None:
            self.file = _CappedReplies(self.sock.makefile("rb"), MAX_SMTP_REPLY)
        if isinstance(self.file, _CappedReplies):
            self.file.count = 0
        return super().getreply()

    def cut(self) -> bool:
        """True when the session ran past its deadline and was cut."""
        return self.guard is not None and self.guard.fired

    def release(self):
        if self.guard is not None:
            self.guard.cancel()

    def data(self, msg):
        """Keeps the server's reply to DATA: the answer the operator wants to see."""
        self.data_reply = super().data(msg)
        return self.data_reply


class _PinnedSMTP(_Pinned, smtplib.SMTP):
    def __init__(self, addresses, timeout):
        self._addresses = addresses
        super().__init__(local_hostname="localhost", timeout=timeout)

    def _wrap(self, sock):
        return sock


class _PinnedSMTPSSL(_Pinned, smtplib.SMTP_SSL):
    """Implicit TLS (the port 465 style)."""

    def __init__(self, addresses, timeout, context):
        self._addresses = addresses
        super().__init__(local_hostname="localhost", timeout=timeout, context=context)

    def _wrap(self, sock):
        return self.context.wrap_socket(sock, server_hostname=self._host)


def _reply(code, message):
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else str(message)
    return f"{code} {text}".strip()


def build_email(cfg, subject, text):
    msg = EmailMessage()
    msg["From"] = cfg["from"]
    msg["To"] = ", ".join(cfg["to"])
    msg["Subject"] = subject
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = make_msgid(domain="contentnode")
    msg.set_content(text)
    return msg


def send_email(cfg, subject, text, policy, timeout=15.0, ssl_context=None):
    """Deliver one message; return the server's reply to the end of DATA.

    `timeout` bounds each wait; the whole session gets SMTP_TOTAL_FACTOR times that.
    """
    host, port, security = cfg["host"], cfg["port"], cfg["security"]
    try:
        addresses = netguard.vet_address(host, port, policy)
    except netguard.OutboundError as exc:
        raise DeliveryError(exc.message, retry=exc.step == "dns") from None
    context = ssl_context or netguard.default_tls_context()
    total = timeout * SMTP_TOTAL_FACTOR
    client = None
    try:
        if security == "tls":
            client = _PinnedSMTPSSL(addresses, timeout, context)
        else:
            client = _PinnedSMTP(addresses, timeout)
        client.deadline = time.monotonic() + total
        try:
            client.connect(host, port)
            client.ehlo_or_helo_if_needed()
            if security == "starttls":
                if not client.has_extn("starttls"):
                    raise DeliveryError("the server does not offer STARTTLS", retry=False)
                client.starttls(context=context)
                client.ehlo()
            if cfg.get("username"):
                client.login(cfg["username"], cfg.get("password") or "")
            msg = build_email(cfg, subject, text)
            refused = client.send_message(msg)
            answer = _reply(*client.data_reply)
            if refused:
                bad = ", ".join(f"{rcpt}: {_reply(*r)}" for rcpt, r in refused.items())
                return f"{answer} (refused: {bad})"
            return answer
        finally:
            try:
                client.quit()
            except (smtplib.SMTPException, OSError):
                client.close()
    except DeliveryError:
        raise
    except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
        if client is not None and client.cut():
            raise DeliveryError(f"the mail server did not finish within {total:g} s") from None
        raise _delivery_error(exc, timeout) from None
    except UnicodeError:
        # smtplib sends AUTH as ASCII only; its error would quote a character of the password
        raise DeliveryError("the username or password holds non-ASCII characters, which SMTP login "
                            "cannot send", retry=False) from None
    except ValueError as exc:
        raise DeliveryError(f"the message could not be sent ({type(exc).__name__})", retry=False) from None
    finally:
        if client is not None:
            client.release()


def _delivery_error(exc, timeout) -> DeliveryError:
    """The DeliveryError for an SMTP, TLS or socket failure (never holding a secret)."""
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return DeliveryError(f"login refused: {_reply(exc.smtp_code, exc.smtp_error)}", retry=False)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        bad = ", ".join(f"{rcpt}: {_reply(*r)}" for rcpt, r in exc.recipients.items())
        return DeliveryError(f"all recipients refused ({bad})", retry=False)
    if isinstance(exc, smtplib.SMTPResponseException):
        return DeliveryError(f"server answered {_reply(exc.smtp_code, exc.smtp_error)}",
                             retry=exc.smtp_code < 500)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return DeliveryError(f"certificate not trusted: {exc.verify_message}", retry=False)
    if isinstance(exc, (ssl.SSLError, smtplib.SMTPException)):
        return DeliveryError(f"SMTP failed: {exc}")
    if isinstance(exc, socket.timeout):
        return DeliveryError(f"no answer from the mail server within {timeout:g} s")
    return DeliveryError(f"connection to the mail server failed: {exc.strerror or exc}")


def send_telegram(cfg, text, policy, timeout=15.0, ssl_context=None):
    """Call sendMessage; return a short description of Telegram's answer."""
    base = (cfg.get("api_url") or DEFAULT_TELEGRAM_API).rstrip("/")
    url = f"{base}/bot{cfg['bot_token']}/sendMessage"
    body = json.dumps({
        "chat_id": cfg["chat_id"],
        "text": text[:TELEGRAM_TEXT_LIMIT],
        "disable_web_page_preview": True,
    }).encode()
    try:
        result = netguard.fetch(url, policy, method="POST", body=body, timeout=timeout,
                                headers={"Content-Type": "application/json"},
                                max_bytes=256 * 1024, ssl_context=ssl_context)
    except netguard.OutboundError as exc:
        raise DeliveryError(f"Telegram API unreachable: {exc.message}") from None
    try:
        answer = json_loads(result.body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise DeliveryError(f"Telegram API answered HTTP {result.status} without a JSON body",
                            retry=result.status >= 500)
    if answer.get("ok") is True and result.status == 200:
        message_id = (answer.get("result") or {}).get("message_id")
        return f"sent (message_id {message_id})"
    description = str(answer.get("description") or "no description")[:300]
    code = answer.get("error_code", result.status)
    retry_after = (answer.get("parameters") or {}).get("retry_after")
    suffix = f", retry after {retry_after} s" if retry_after else ""
    wait = float(retry_after) if isinstance(retry_after, int) and not isinstance(retry_after, bool) else None
    raise DeliveryError(f"Telegram answered {code}: {description}{suffix}",
                        retry=result.status == 429 or result.status >= 500, retry_after=wait)
