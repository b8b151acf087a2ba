"""The two HTTP push channels: a signed JSON webhook and an ntfy topic.

Both go through netguard like every outbound request (vetted addresses, no
redirects followed, timeouts, capped answers) and turn the far side's answer
into the detail the operator sees, or a DeliveryError that says whether a
retry may help and how long the far side asked us to wait (Retry-After).

The webhook signs `<unix time>.<body>` with HMAC-SHA256 under the channel's
secret (header X-Contentnode-Signature: t=<unix>,v1=<hex>), so a receiver can
check both who sent it and that it is fresh; docs/API.md shows the receiver's
side.
"""

import base64
import hashlib
import hmac
import json
from email.utils import parsedate_to_datetime

from contentnode.core import netguard
from contentnode.core.text import escaped_line, json_loads

SIGNATURE_HEADER = "X-Contentnode-Signature"
EVENT_HEADER = "X-Contentnode-Event"
EVENT_ID_HEADER = "X-Contentnode-Event-Id"
DEFAULT_NTFY_SERVER = "https://ntfy.sh"
MAX_ANSWER = 64 * 1024            # bytes of the far side's answer that are read
SHOWN_ANSWER = 200                # characters of it quoted in a failure
NTFY_MESSAGE_LIMIT = 4096         # ntfy turns a longer body into an attachment
RETRIED_STATUSES = frozenset({408, 429})
# Outbound failures no retry can cure: a bad URL, an address the policy refuses, an untrusted certificate.
PERMANENT_STEPS = frozenset({"url", "address", "tls"})


class DeliveryError(Exception):
    """A failed delivery; `retry` says whether trying again later may help, and
    `retry_after` how many seconds the far side asked us to wait (None: it did not say)."""

    def __init__(self, message, retry=True, retry_after=None):
        super().__init__(message)
        self.retry = retry
        self.retry_after = retry_after


# ntfy priorities (1 min .. 5 max) and tags (emoji short codes) per event; others get 3 and "bell".
NTFY_PRIORITY = {"cert_renewal_failed": 4, "cert_expiring": 4, "login_failures_burst": 4,
                 "domain_check_failed": 4, "bucket_check_failed": 4, "update_available": 2}
NTFY_TAG = {"cert_renewal_failed": "warning", "cert_expiring": "warning", "login_failures_burst": "rotating_light",
            "domain_check_failed": "warning", "bucket_check_failed": "warning",
            "admin_login_new_address": "key", "backup_restored": "floppy_disk",
            "update_available": "package", "user_created": "bust_in_silhouette",
            "user_deleted": "bust_in_silhouette", "test": "white_check_mark"}


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value that signs `body` at `timestamp` (what a receiver recomputes)."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def webhook_body(message) -> bytes:
    """The JSON the webhook receives: the same bytes on every attempt (its `id` is the idempotency key)."""
    return json.dumps({"id": message.id, "event": message.event, "node": message.node,
                       "created_at": message.created_at, "subject": message.subject,
                       "text": message.text, "fields": message.fields},
                      ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


def send_webhook(cfg, message, policy, now, timeout=15.0, ssl_context=None):
    """POST the signed event; return "HTTP <status>" of a 2xx answer or raise DeliveryError."""
    body = webhook_body(message)
    headers = {"Content-Type": "application/json", EVENT_HEADER: message.event, EVENT_ID_HEADER: message.id,
               SIGNATURE_HEADER: signature(cfg["secret"], int(now()), body)}
    result = _post(cfg["url"], body, headers, policy, timeout, ssl_context, "the webhook")
    if 200 <= result.status < 300:
        return escaped_line(f"HTTP {result.status} {result.reason}".strip(), SHOWN_ANSWER)
    raise _refusal("the webhook", result, now, _quote(result.body))


def ntfy_headers(cfg, message) -> dict:
    """Title, Priority and Tags as ntfy documents them; a non-ASCII title RFC 2047-encoded."""
    headers = {"Title": _header_text(message.subject),
               "Priority": str(NTFY_PRIORITY.get(message.event, 3)),
               "Tags": f"{NTFY_TAG.get(message.event, 'bell')},{message.event}",
               "Content-Type": "text/plain; charset=utf-8"}
    if cfg.get("token"):
        headers["Authorization"] = f"Bearer {cfg['token']}"
    return headers


def ntfy_url(cfg) -> str:
    return f"{(cfg.get('server') or DEFAULT_NTFY_SERVER).rstrip('/')}/{cfg['topic']}"


def send_ntfy(cfg, message, policy, now, timeout=15.0, ssl_context=None):
    """Publish the message to the topic; return ntfy's message id or raise DeliveryError."""
    body = message.text.encode("utf-8")[:NTFY_MESSAGE_LIMIT]
    result = _post(ntfy_url(cfg), body, ntfy_headers(cfg, message), policy, timeout, ssl_context, "ntfy")
    try:
        answer = json_loads(result.body)
    except ValueError:
        answer = None
    answer = answer if isinstance(answer, dict) else {}
    if 200 <= result.status < 300:
        return f"sent (id {escaped_line(str(answer.get('id') or '?'), 64)})"
    said = answer.get("error") or _quote(result.body)
    raise _refusal("ntfy", result, now, escaped_line(str(said), SHOWN_ANSWER))


def _post(url, body, headers, policy, timeout, ssl_context, what):
    try:
        return netguard.fetch(url, policy, method="POST", body=body, headers=headers, timeout=timeout,
                              max_bytes=MAX_ANSWER, ssl_context=ssl_context)
    except netguard.OutboundError as exc:
        raise DeliveryError(f"{what} unreachable ({exc.step}): {exc.message}",
                            retry=exc.step not in PERMANENT_STEPS) from None


def _refusal(what, result, now, said) -> DeliveryError:
    """The DeliveryError of a non-2xx answer: 5xx, 408 and 429 may pass, the rest will not."""
    status = result.status
    if 300 <= status < 400:
        return DeliveryError(f"{what} answered a redirect (HTTP {status}); redirects are not followed: "
                             "give the final URL", retry=False)
    retry = status >= 500 or status in RETRIED_STATUSES
    wait = retry_after(result.headers.get("retry-after"), now) if retry else None
    suffix = f", retry after {wait:g} s" if wait is not None else ""
    said = f": {said}" if said else ""
    return DeliveryError(f"{what} answered HTTP {status}{said}{suffix}", retry=retry, retry_after=wait)


def retry_after(value, now) -> float | None:
    """Seconds a Retry-After header asks for (delay-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(min(int(value[:9]), 10 ** 8))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now())


def _quote(body: bytes) -> str:
    """The start of the far side's answer, on one line."""
    return escaped_line(body[:SHOWN_ANSWER * 4].decode("utf-8", "replace").strip(), SHOWN_ANSWER)


def _header_text(value: str) -> str:
    """A header value http.client can send: ASCII as is, anything else as an RFC 2047 word."""
    value = escaped_line(value)
    if value.isascii():
        return value
    return "=?UTF-8?B?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="

