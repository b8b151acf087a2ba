"""Notifications: the channel configuration, one message per event, and a
background queue that delivers them with timeouts and bounded retries.

Events come from the whole daemon through the event bus; nothing that emits
one may wait for a mail server, so `handle_event` only queues. The worker
reads the configuration when it sends, so switching a channel off also stops
messages already queued for it.
"""

import heapq
import ipaddress
import itertools
import logging
import re
import threading
import time

from contentnode.core import settings as st
from contentnode.core.events import EVENTS
from contentnode.core.fields import FieldError
from contentnode.core.notify_transport import DeliveryError, send_email, send_telegram
from contentnode.core.text import one_line as is_one_line

log = logging.getLogger("contentnode.notify")

CHANNELS = ("email", "telegram")
SECURITY_MODES = ("none", "starttls", "tls")
SECRETS = {"email": "password", "telegram": "bot_token"}
# Where a channel's secret is sent. Changing one of these while a secret is stored
# needs the secret again in the same request: the stored one is only ever sent to
# the place (and in the way) it was given for, so whoever may edit the channel
# cannot point it at their own server and collect it.
SECRET_DESTINATION = {"email": ("host", "port", "security"), "telegram": ("api_url",)}
MAX_RECIPIENTS = 20

DEFAULT_CONFIG = {
    "email": {"enabled": False, "host": None, "port": 587, "security": "starttls",
              "username": None, "password": None, "from": None, "to": []},
    "telegram": {"enabled": False, "bot_token": None, "chat_id": None, "api_url": None},
    "events": {name: True for name in EVENTS},
}

_BOT_TOKEN = re.compile(r"^[0-9]{1,20}:[A-Za-z0-9_-]{20,100}$")
_CHAT_ID = re.compile(r"^(-?[0-9]{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31})$")
_SECRET_FIELD = re.compile(r"(password|secret|token|private|key_pem|hash)", re.I)


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
    for part, value in body.items():
        if part not in DEFAULT_CONFIG:
            raise FieldError(f"unknown field {part!r}", part)
        if not isinstance(value, dict):
            raise FieldError(f"{part} must be a JSON object", part)
        for key, item in value.items():
            field = f"{part}.{key}"
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
        if new[part]["enabled"]:
            require_complete(part, new[part])
    return new


def require_complete(part, cfg):
    """A channel can only be enabled (or tested) with everything it needs to send."""
    needed = {"email": ("host", "from", "to"), "telegram": ("bot_token", "chat_id")}[part]
    for key in needed:
        if not cfg.get(key):
            raise FieldError(f"{part}.{key} is required while {part} is enabled", f"{part}.{key}")
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
}


class _Blank(dict):
    def __missing__(self, key):
        return "?"


def one_line(value, limit: int = 200) -> str:
    """A field value as one line: line breaks and other control characters escaped, length capped,
    so text someone typed (a username, a bucket name) cannot add lines to an operator's alert."""
    text = str(value)
    text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else text[:limit] + "..."


MULTILINE_FIELDS = {"notes"}  # release notes from the update feed keep their lines


def format_message(event, fields, node_name):
    """(subject, text) for one event; secret-looking fields are never printed, the others on one line."""
    shown = {k: v if k in MULTILINE_FIELDS else one_line(v)
             for k, v in fields.items() if not _SECRET_FIELD.search(k)}
    node_name = one_line(node_name)
    subject_t, body_t = EVENTS.get(event, (event.replace("_", " "), ""))
    subject = f"[{node_name}] " + subject_t.format_map(_Blank(shown))
    lines = [body_t.format_map(_Blank(shown)).strip(), "", f"Event: {event}", f"Node: {node_name}"]
    lines += [f"{k}: {v}" for k, v in sorted(shown.items())]
    return subject, "\n".join(lines).strip() + "\n"


def deliver(channel, cfg, subject, text, policy, timeout, ssl_context=None):
    """Send one message on one channel now; return the transport's answer."""
    if channel == "email":
        return send_email(cfg, subject, text, policy, timeout, ssl_context)
    return send_telegram(cfg, f"{subject}\n\n{text}", policy, timeout, ssl_context)


class Notifier:
    """Background delivery: a due-time queue, one worker thread, bounded retries.

    get_config() -> notification config; get_policy() -> OutboundPolicy;
    get_node_name() -> str; on_result(channel, event, ok, detail) reports each
    final outcome (the daemon logs and audits failures).
    """

    def __init__(self, get_config, get_policy, get_node_name, on_result=None,
                 retry_delays=(5, 30, 120), timeout=15.0, max_pending=500, ssl_context=None):
        self._get_config = get_config
        self._get_policy = get_policy
        self._get_node_name = get_node_name
        self._on_result = on_result or (lambda *a: None)
        self._retry_delays = tuple(retry_delays)
        self._timeout = timeout
        self._max_pending = max_pending
        self._ssl_context = ssl_context
        self._heap = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = None

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
        subject, text = format_message(name, fields, self._get_node_name())
        with self._cond:
            for channel in CHANNELS:
                if not cfg[channel]["enabled"]:
                    continue
                if len(self._heap) >= self._max_pending:
                    log.warning("notification queue full: %s for %s dropped", name, channel)
                    self._on_result(channel, name, False, "queue full, message dropped")
                    continue
                job = {"channel": channel, "event": name, "subject": subject, "text": text, "attempt": 0}
                heapq.heappush(self._heap, (time.monotonic(), next(self._seq), job))
            self._cond.notify_all()

    def test(self, channel):
        """One immediate delivery of a test message: (ok, transport answer)."""
        cfg = self._get_config()
        node = self._get_node_name()
        subject = f"[{node}] Test notification"
        text = f"This is a test message from contentnode node {node}.\n"
        try:
            detail = deliver(channel, cfg[channel], subject, text, self._get_policy(),
                             self._timeout, self._ssl_context)
            return True, detail
        except DeliveryError as exc:
            return False, str(exc)

    def _next_job(self):
        with self._cond:
            while not self._stopping:
                if self._heap and self._heap[0][0] <= time.monotonic():
                    return heapq.heappop(self._heap)[2]
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
        channel = job["channel"]
        cfg = self._get_config()[channel]
        if not cfg["enabled"]:
            return
        try:
            detail = deliver(channel, cfg, job["subject"], job["text"], self._get_policy(),
                             self._timeout, self._ssl_context)
        except DeliveryError as exc:
            if exc.retry and job["attempt"] < len(self._retry_delays):
                delay = self._retry_delays[job["attempt"]]
                job["attempt"] += 1
                log.info("notification %s via %s failed (%s); retry %d in %gs",
                         job["event"], channel, exc, job["attempt"], delay)
                with self._cond:
                    heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), job))
                    self._cond.notify_all()
                return
            log.warning("notification %s via %s failed: %s", job["event"], channel, exc)
            self._on_result(channel, job["event"], False, str(exc))
            return
        self._on_result(channel, job["event"], True, detail)
