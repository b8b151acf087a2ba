"""Two small receivers on loopback for the HTTP push channels, written from the
receiver's side only (nothing here imports contentnode):

- WebhookReceiver checks X-Contentnode-Signature the way docs/API.md tells a
  receiver to (HMAC-SHA256 over "<t>.<body>", timestamp within a tolerance,
  a signature seen before refused as a replay) and records every delivery;
- NtfyReceiver answers POST /<topic> as an ntfy server does and records the
  path, Authorization and the headers ntfy documents (Title, Priority, Tags).

Both serve plain http, or https under a test CA (`tls=True`: trust `ca_file`).
`fail_next(status, ...)` makes the next answers fail (with optional headers,
or a delay before answering).
"""

import email.header
import hashlib
import hmac
import json
import os
import ssl
import tempfile
import threading
import time

from tests import certgen
from tests.peers.stub import LoopbackServer, PeerServer, QuietHandler

TOLERANCE = 300  # seconds a signed timestamp may be away from the receiver's clock


def _tls_context(directory):
    """A server context with a leaf for 127.0.0.1 and localhost, signed by a fresh CA; (context, ca_file)."""
    ca, ca_key = certgen.make_ca()
    leaf, leaf_key = certgen.make_leaf(["localhost"], issuer=ca, issuer_key=ca_key, ips=["127.0.0.1"])
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "leaf.pem", "key.pem")}
    for name, text in (("ca.pem", certgen.cert_pem(ca)), ("leaf.pem", certgen.cert_pem(leaf)),
                       ("key.pem", certgen.key_pem(leaf_key))):
        with open(paths[name], "w") as f:
            f.write(text)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(paths["leaf.pem"], paths["key.pem"])
    return context, paths["ca.pem"]


class _Receiver(PeerServer):
    """What both receivers share: the server, the delivery log and scripted failures."""

    name = "receiver"

    def __init__(self, tls=False):
        self.tls = tls
        self.ca_file = None
        self.deliveries = []
        self._failures = []
        self._cond = threading.Condition()

    def fail_next(self, status, count=1, headers=None, delay=0.0):
        with self._cond:
            self._failures.extend([(status, headers or {}, delay)] * count)

    def _scripted_failure(self):
        with self._cond:
            return self._failures.pop(0) if self._failures else None

    def _record(self, entry):
        with self._cond:
            entry["at"] = time.monotonic()
            self.deliveries.append(entry)
            self._cond.notify_all()

    def wait_for(self, count, timeout=20):
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.deliveries) >= count, timeout), self.deliveries
            return list(self.deliveries)

    def start(self):
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                # answer(): (status, headers, body), as the subclass decides
                status, headers, body = receiver.answer(self, self.path, self.headers, raw)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        context = None
        if self.tls:
            self._dir = tempfile.mkdtemp(prefix=f"{self.name}-")
            context, self.ca_file = _tls_context(self._dir)
        self._server = LoopbackServer(Handler, name=self.name, poll_interval=0.1, ssl_context=context)
        return self



def verify(secret: str, header: str, raw: bytes, now: float, tolerance: float = TOLERANCE) -> str | None:
    """Why a signed delivery is refused, or None: the receiver's check, written from the documentation."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return "malformed signature header"
    expected = hmac.new(secret.encode(), str(timestamp).encode() + b"." + raw, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, given):
        return "bad signature"
    if abs(now - timestamp) > tolerance:
        return "timestamp outside the tolerance"
    return None


class WebhookReceiver(_Receiver):
    """Accepts a delivery only when its signature verifies under `secret` and its
    timestamp is fresh (by its own clock, moved on by `clock_offset`); an event id
    it already accepted is answered 200 and not processed again (idempotency), so
    a delivery captured and sent again achieves nothing."""

    name = "webhook-receiver"

    def __init__(self, secret, tls=False):
        super().__init__(tls)
        self.secret = secret
        self.clock_offset = 0.0
        self._accepted = set()

    def answer(self, handler, path, headers, raw):
        header = headers.get("X-Contentnode-Signature") or ""
        entry = {"path": path, "headers": dict(headers), "raw": raw, "signature": header, "duplicate": False}
        try:
            entry["json"] = json.loads(raw)
        except ValueError:
            entry["json"] = None
        entry["refused"] = why = verify(self.secret, header, raw, time.time() + self.clock_offset)
        if why:
            entry["status"] = 401 if why == "bad signature" else 400
            self._record(entry)
            return entry["status"], {}, json.dumps({"error": why}).encode()
        failure = self._scripted_failure()
        if failure:
            status, extra, delay = failure
            time.sleep(delay)
            entry["status"] = status
            self._record(entry)
            return status, extra, json.dumps({"error": "scripted failure"}).encode()
        event_id = (entry["json"] or {}).get("id")
        with self._cond:
            entry["duplicate"] = event_id in self._accepted
            self._accepted.add(event_id)
        entry["status"] = 200
        self._record(entry)
        return 200, {}, json.dumps({"received": True, "duplicate": entry["duplicate"]}).encode()


class NtfyReceiver(_Receiver):
    """POST /<topic> as ntfy.sh answers it; with `token`, only `Bearer <token>` may publish."""

    name = "ntfy-receiver"

    def __init__(self, token=None, tls=False):
        super().__init__(tls)
        self.token = token

    def answer(self, handler, path, headers, raw):
        failure = self._scripted_failure()
        title = headers.get("Title")
        decoded = "".join(part.decode(charset or "ascii") if isinstance(part, bytes) else part
                          for part, charset in email.header.decode_header(title)) if title else None
        entry = {"path": path, "topic": path.lstrip("/"), "title": decoded, "priority": headers.get("Priority"),
                 "tags": headers.get("Tags"), "authorization": headers.get("Authorization"),
                 "message": raw.decode("utf-8")}
        if failure:
            status, extra, delay = failure
            time.sleep(delay)
            entry["status"] = status
            self._record(entry)
            return status, extra, json.dumps({"code": status * 100, "http": status, "error": "scripted"}).encode()
        if self.token is not None and entry["authorization"] != f"Bearer {self.token}":
            entry["status"] = 403
            self._record(entry)
            return 403, {}, b'{"code":40301,"http":403,"error":"forbidden","link":"https://ntfy.sh/docs/publish/"}'
        if path.count("/") != 1 or not entry["topic"]:
            entry["status"] = 404
            self._record(entry)
            return 404, {}, b'{"code":40401,"http":404,"error":"page not found"}'
        entry["status"] = 200
        self._record(entry)
        number = len(self.deliveries)
        return 200, {}, json.dumps({"id": f"msg{number}", "time": int(time.time()), "event": "message",
                                    "topic": entry["topic"], "message": entry["message"]}).encode()
