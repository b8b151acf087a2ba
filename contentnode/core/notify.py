"""Notifications: the channel configuration, one message per event, and a
background queue that delivers them with timeouts and bounded retries
(exponential backoff with jitter, Retry-After honoured up to a cap).

Events come from the whole daemon through the event bus; nothing that emits
one may wait for a mail server, so `handle_event` only queues. The worker
reads the configuration when it sends, so switching a channel off also stops
messages already queued for it.
"""

import heapq
import ipaddress
import itertools
import logging
import random
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field as member
from urllib.parse import urlsplit

from contentnode.clock import rfc3339
from contentnode.core import netguard
from contentnode.core import settings as st
from contentnode.core.events import EVENTS
from contentnode.core.fields import FieldError
from contentnode.core.notify_http import DeliveryError, send_ntfy, send_webhook
from contentnode.core.text import escaped_line
from contentnode.core.text import one_line as is_one_line

log = logging.getLogger("contentnode.notify")

CHANNELS = ("email", "telegram", "webhook", "ntfy")
SECURITY_MODES = ("none", "starttls", "tls")
SECRETS = {"email": "password", "telegram": "bot_token", "webhook": "secret", "ntfy": "token"}
# Where a channel's secret is sent. Changing one of these while a secret is stored
# needs the secret again in the same request: the stored one is only ever sent to
# the place (and in the way) it was given for, so whoever may edit the channel
# cannot point it at their own server and collect it. The webhook's secret never
# leaves the node (it only signs), so its URL may move freely.
SECRET_DESTINATION = {"email": ("host", "port", "security"), "telegram": ("api_url",), "webhook": (),
                      "ntfy": ("server",)}
REQUIRED = {"email": ("host", "from", "to"), "telegram": ("bot_token", "chat_id"), "webhook": ("url", "secret"),
            "ntfy": ("topic",)}
# The URLs of the HTTP push channels, vetted against the outbound policy when saved.
PUSH_URLS = (("webhook", "url"), ("ntfy", "server"))
MAX_RECIPIENTS = 20
GENERATE_SECRET = "generate_secret"  # webhook body member: make a new secret (shown once)

DEFAULT_CONFIG = {
    "email": {"enabled": False, "host": None, "port": 587, "security": "starttls",
              "username": None, "password": None, "from": None, "to": []},
    "telegram": {"enabled": False, "bot_token": None, "chat_id": None, "api_url": None},
    "webhook": {"enabled": False, "url": None, "secret": None},
    "ntfy": {"enabled": False, "server": None, "topic": None, "token": None},
    "events": {name: True for name in EVENTS},
}

_BOT_TOKEN = re.compile(r"^[0-9]{1,20}:[A-Za-z0-9_-]{20,100}$")
_CHAT_ID = re.compile(r"^(-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31})$")
_SECRET_FIELD = re.compile(r"(password|secret|token|private|key_pem|hash)", re.I)
_WEBHOOK_SECRET = re.compile(r"^[\x21-\x7e]{16,256}$")
_NTFY_TOPIC = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NTFY_TOKEN = re.compile(r"^[\x21-\x7e]{1,256}$")


def effective(doc):
    """The notification configuration: defaults overlaid with the stored one."""
    stored = doc.get("notifications", {}) or {}
    return {part: dict(default, **(stored.get(part) or {})) for part, default in DEFAULT_CONFIG.items()}


def public_view(cfg):
    """The configuration without secrets: `<name>_set` instead of the value."""
    out = {}
    for part, values in cfg.items():
        shown = dict(values)
        secret = SECRETS.get(part)
        if secret:
            shown[secret + "_set"] = bool(shown.pop(secret, None))
        out[part] = shown
    return out


def merge(current, body):
    """Apply a partial update to `current`; return the new config or raise FieldError.

    A secret that is absent stays as it is; null clears it.
    """
    if not isinstance(body, dict):
        raise FieldError("body must be a JSON object")
    new = {part: dict(values) for part, values in current.items()}
    generate = False
    for part, value in body.items():
        if part not in DEFAULT_CONFIG:
            raise FieldError(f"unknown field {part!r}", part)
        if not isinstance(value, dict):
            raise FieldError(f"{part} must be a JSON object", part)
        for key, item in value.items():
            field = f"{part}.{key}"
            if field == f"webhook.{GENERATE_SECRET}":
                generate = st._bool(field, item)
                continue
            check = _FIELD_CHECKS[part].get(key) if part != "events" else _event_switch
            if check is None:
                raise FieldError(f"unknown field {field!r}", field)
            new[part][key] = check(field, item)
    for part in CHANNELS:
        secret, sent = SECRETS[part], body.get(part) or {}
        moved = [key for key in SECRET_DESTINATION[part] if new[part][key] != current[part][key]]
        if moved and current[part].get(secret) and secret not in sent:
            raise FieldError(f"{part}.{secret} must be sent again (or null) when "
                             f"{part}.{moved[0]} changes: the stored one is not sent to a new place",
                             f"{part}.{secret}")
        if part == "webhook":
            _webhook_secret(new["webhook"], sent, generate)
        if new[part]["enabled"]:
            require_complete(part, new[part])
    return new


def _webhook_secret(cfg, sent, generate):
    """A new secret when asked for, or when the webhook is switched on without one and none was sent."""
    if generate and "secret" in sent:
        raise FieldError(f"send webhook.secret or webhook.{GENERATE_SECRET}, not both", f"webhook.{GENERATE_SECRET}")
    if generate or (cfg["enabled"] and not cfg["secret"] and "secret" not in sent):
        cfg["secret"] = secrets.token_urlsafe(32)


def check_destinations(cfg, body, policy):
    """Refuse at save time a push URL whose host is an address the outbound policy refuses.

    Only address literals are vetted here (a name is not resolved at save: its
    addresses may change); every send vets the addresses again.
    """
    for part, key in PUSH_URLS:
        url = cfg[part][key]
        if not url or key not in (body.get(part) or {}):
            continue
        parts = urlsplit(url)
        try:
            ipaddress.ip_address(parts.hostname)
        except ValueError:
            continue
        try:
            netguard.vet_address(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), policy)
        except netguard.OutboundError as exc:
            raise FieldError(f"{part}.{key} is refused: {exc.message}", f"{part}.{key}") from None


def require_complete(part, cfg):
    """A channel can only be enabled (or tested) with everything it needs to send."""
    for key in REQUIRED[part]:
        if not cfg.get(key):
            raise FieldError(f"{part}.{key} is required while {part} is enabled", f"{part}.{key}")
    if part == "ntfy" and cfg.get("token") and cfg.get("server") \
            and urlsplit(cfg["server"]).scheme == "http" and not _on_this_machine(urlsplit(cfg["server"]).hostname):
        raise FieldError("an access token is only sent over https, except to an ntfy server on this machine",
                         "ntfy.server")
    if part == "email" and cfg.get("password") and not cfg.get("username"):
        raise FieldError("email.username is required when a password is set", "email.username")
    if part == "email" and cfg.get("password") and cfg.get("security") == "none" \
            and not _on_this_machine(cfg.get("host")):
        raise FieldError("a password is only sent over TLS (starttls or tls), "
                         "except to a mail server on this machine", "email.security")


def _on_this_machine(host) -> bool:
    """localhost or a loopback address: the one place a password may travel without TLS."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _own_network(host) -> bool:
    """localhost, or a loopback or private address literal: where plain http may go."""
    if _on_this_machine(host):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_private
    except ValueError:
        return False


def _push_url(field, value):
    """An https URL (no query), or http to this machine or a private address of the operator's network."""
    url = st.http_url(field, value, allow_path=True)
    parts = urlsplit(url)
    if parts.query:
        raise FieldError(f"{field} must not have a query", field)
    if parts.scheme == "http" and not _own_network(parts.hostname):
        raise FieldError(f"{field} must be https (plain http only to localhost or a loopback or private address)",
                         field)
    return url


def _event_switch(field, value):
    if field.split(".", 1)[1] not in EVENTS:
        raise FieldError(f"unknown event {field.split('.', 1)[1]!r}", field)
    return st._bool(field, value)


def _host(field, value):
    """A mail server: an IP address or a host name (single-label names allowed on a LAN)."""
    value = st._text(field, value, 253)
    try:
        return str(ipaddress.ip_address(value.strip("[]")))
    except ValueError:
        return st.hostname(field, value, fqdn=False)


def _recipients(field, value):
    if not isinstance(value, list) or len(value) > MAX_RECIPIENTS:
        raise FieldError(f"{field} must be a list of at most {MAX_RECIPIENTS} addresses", field)
    out = [st._email(field, item) for item in value]
    return list(dict.fromkeys(out))


def _pattern(regex, what):
    def check(field, value):
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not is_one_line(value) or not regex.match(value.strip()):
            raise FieldError(f"{field} must be {what}", field)
        return value.strip()
    return check


def _nullable(check):
    return lambda field, value: None if value in (None, "") else check(field, value)


_FIELD_CHECKS = {
    "email": {
        "enabled": st._bool,
        "host": _nullable(_host),
        "port": lambda f, v: st._int(f, v, 1, 65535),
        "security": lambda f, v: st._choice(f, v, SECURITY_MODES),
        "username": _nullable(lambda f, v: st._text(f, v, 254)),
        "password": _nullable(lambda f, v: st._text(f, v, 1024)),
        "from": _nullable(st._email),
        "to": _recipients,
    },
    "telegram": {
        "enabled": st._bool,
        "bot_token": _nullable(_pattern(_BOT_TOKEN, "a bot token such as 123456:ABC...")),
        "chat_id": _nullable(_pattern(_CHAT_ID, "a numeric chat id or an @channel name")),
        "api_url": _nullable(lambda f, v: st.http_url(f, v, allow_path=True)),
    },
    "webhook": {
        "enabled": st._bool,
        "url": _nullable(_push_url),
        "secret": _nullable(_pattern(_WEBHOOK_SECRET, "16 to 256 printable ASCII characters without spaces")),
    },
    "ntfy": {
        "enabled": st._bool,
        "server": _nullable(_push_url),
        "topic": _nullable(_pattern(_NTFY_TOPIC, "1 to 64 letters, digits, - or _")),
        "token": _nullable(_pattern(_NTFY_TOKEN, "1 to 256 printable ASCII characters without spaces")),
    },
}


class _Blank(dict):
    def __missing__(self, key):
        return "?"


MULTILINE_FIELDS = {"notes"}  # release notes from the update feed keep their lines


def format_message(event, fields, node_name):
    """(subject, text) for one event; secret-looking fields are never printed, the others on one line."""
    shown = {k: v if k in MULTILINE_FIELDS else escaped_line(v) for k, v in public_fields(fields).items()}
    node_name = escaped_line(node_name)
    subject_t, body_t = EVENTS.get(event, (event.replace("_", " "), ""))
    subject = f"[{node_name}] " + subject_t.format_map(_Blank(shown))
    lines = [body_t.format_map(_Blank(shown)).strip(), "", f"Event: {event}", f"Node: {node_name}"]
    lines += [f"{k}: {v}" for k, v in sorted(shown.items())]
    return subject, "\n".join(lines).strip() + "\n"


def public_fields(fields) -> dict:
    """An event's fields without the secret-looking ones."""
    return {k: v for k, v in fields.items() if not _SECRET_FIELD.search(k)}


@dataclass(frozen=True)
class Message:
    """One notification: the same text and the same id on every channel and every attempt."""

    id: str
    event: str
    node: str
    created_at: str | None  # RFC 3339, from clock.rfc3339
    subject: str
    text: str
    fields: dict = member(default_factory=dict)


def make_message(event, fields, node_name, now) -> Message:
    subject, text = format_message(event, fields, node_name)
    return Message(str(uuid.uuid4()), event, node_name, rfc3339(now), subject, text, public_fields(fields))


def deliver(channel, cfg, message, policy, timeout, ssl_context=None, now=time.time):
    """Send one message on one channel now; return the transport's answer. SMTP and Telegram are
    imported at the first such send: smtplib and email.message are 18 modules a start need not load."""
    if channel in ("email", "telegram"):
        from contentnode.core.notify_transport import send_email, send_telegram
    if channel == "email":
        return send_email(cfg, message.subject, message.text, policy, timeout, ssl_context)
    if channel == "telegram":
        return send_telegram(cfg, f"{message.subject}\n\n{message.text}", policy, timeout, ssl_context)
    if channel == "webhook":
        return send_webhook(cfg, message, policy, now, timeout, ssl_context)
    return send_ntfy(cfg, message, policy, now, timeout, ssl_context)


@dataclass(frozen=True)
class RetryPolicy:
    """When a failed delivery is tried again: at most `retries` times, after about
    `first`, `first * factor`, ... seconds, each drawn between half and all of that
    (jitter, so nodes that failed together do not retry in step), but at least
    what the far side asked for (Retry-After, up to `retry_after_cap`), and never
    once `give_up_after` seconds have passed since the message was queued."""

    first: float = 5.0
    factor: float = 5.0
    retries: int = 3
    retry_after_cap: float = 300.0
    give_up_after: float = 900.0

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        nominal = self.first * self.factor ** attempt
        wait = nominal / 2 + rng.uniform(0, nominal / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_cap))
        return wait


class Notifier:
    """Background delivery: a due-time queue, one worker thread, bounded retries.

    get_config() -> notification config; get_policy() -> OutboundPolicy;
    get_node_name() -> str; on_result(channel, event, ok, detail) reports each
    final outcome (the daemon logs and audits failures); now() -> epoch seconds
    (the App's clock: event times and webhook signatures).

    At most `max_pending` messages wait (retries included). When it is full, new
    messages are dropped (those already waiting keep their place): the first drop
    is logged and reported once, and the count when the queue has drained to half.
    """

    def __init__(self, get_config, get_policy, get_node_name, on_result=None, retry=RetryPolicy(),
                 timeout=15.0, max_pending=500, ssl_context=None, now=time.time):
        self._get_config = get_config
        self._get_policy = get_policy
        self._get_node_name = get_node_name
        self._on_result = on_result or (lambda *a: None)
        self._retry = retry
        self._rng = random.Random()
        self._timeout = timeout
        self._max_pending = max_pending
        self._ssl_context = ssl_context
        self._now = now
        self._heap = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = None
        self._dropped = 0

    def start(self):
        self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
        self._thread.start()

    def stop(self, timeout=5.0):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)

    def pending(self):
        with self._cond:
            return len(self._heap)

    def handle_event(self, name, fields):
        """Event-bus callback: queue one message per enabled channel, never block."""
        cfg = self._get_config()
        if not cfg["events"].get(name, False):
            return
        message = make_message(name, fields, self._get_node_name(), self._now())
        with self._cond:
            for channel in CHANNELS:
                if not cfg[channel]["enabled"]:
                    continue
                if len(self._heap) >= self._max_pending:
                    self._drop(channel, name)
                    continue
                job = {"channel": channel, "message": message, "attempt": 0, "queued": time.monotonic()}
                heapq.heappush(self._heap, (time.monotonic(), next(self._seq), job))
            self._cond.notify_all()

    def _drop(self, channel, event):
        """Count a message the full queue refused; say so once per full spell (called under the lock)."""
        self._dropped += 1
        if self._dropped == 1:
            log.warning("notification queue full (%d messages waiting): new messages are dropped until "
                        "it drains (logged once)", self._max_pending)
            self._on_result(channel, event, False, "queue full: this and later messages are dropped until it drains")

    def test(self, channel):
        """One immediate delivery of a test message: (ok, transport answer)."""
        cfg = self._get_config()
        node = self._get_node_name()
        message = Message(str(uuid.uuid4()), "test", node, rfc3339(self._now()), f"[{node}] Test notification",
                          f"This is a test message from contentnode node {node}.\n")
        try:
            return True, deliver(channel, cfg[channel], message, self._get_policy(), self._timeout,
                                 self._ssl_context, self._now)
        except DeliveryError as exc:
            return False, str(exc)

    def _next_job(self):
        with self._cond:
            while not self._stopping:
                if self._heap and self._heap[0][0] <= time.monotonic():
                    job = heapq.heappop(self._heap)[2]
                    if self._dropped and len(self._heap) <= self._max_pending // 2:
                        log.warning("notification queue drained: %d messages were dropped while it was full",
                                    self._dropped)
                        self._dropped = 0
                    return job
                wait = self._heap[0][0] - time.monotonic() if self._heap else None
                self._cond.wait(wait)
            return None

    def _run(self):
        while (job := self._next_job()) is not None:
            try:
                self._attempt(job)
            except Exception:  # a bug here must not kill delivery of later messages
                log.exception("notification worker error")

    def _attempt(self, job):
        channel, event = job["channel"], job["message"].event
        cfg = self._get_config()[channel]
        if not cfg["enabled"]:
            return
        try:
            detail = deliver(channel, cfg, job["message"], self._get_policy(), self._timeout,
                             self._ssl_context, self._now)
        except DeliveryError as exc:
            detail = str(exc)
            if exc.retry and job["attempt"] < self._retry.retries:
                due = time.monotonic() + self._retry.delay(job["attempt"], exc.retry_after, self._rng)
                if due - job["queued"] <= self._retry.give_up_after:
                    job["attempt"] += 1
                    log.info("notification %s via %s failed (%s); retry %d in %.1fs",
                             event, channel, exc, job["attempt"], due - time.monotonic())
                    with self._cond:
                        heapq.heappush(self._heap, (due, next(self._seq), job))
                        self._cond.notify_all()
                    return
                detail += f" (not retried: the next try would pass {self._retry.give_up_after:g} s after queueing)"
            log.warning("notification %s via %s failed: %s", event, channel, detail)
            self._on_result(channel, event, False, detail)
            return
        self._on_result(channel, event, True, detail)
