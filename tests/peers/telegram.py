"""The one allowed fake: a loopback HTTP server speaking Telegram's Bot API
sendMessage, with Telegram's own answers for a bad token, an unknown chat,
an empty text and flood control (429 with retry_after)."""

import json
import re
import threading
import time

from tests.peers.stub import LoopbackServer, PeerServer, QuietHandler

_PATH = re.compile(r"^/bot(?P<token>[^/]+)/(?P<method>[A-Za-z]+)$")


class FakeTelegram(PeerServer):
    """tokens: valid bot tokens; chats: known chat ids (as strings).

    `fail_next(n, status)` makes the next n calls answer an error (500 or 429).
    """

    def __init__(self, tokens, chats):
        self.tokens = set(tokens)
        self.chats = {str(c) for c in chats}
        self.messages = []
        self.calls = 0
        self._failures = []
        self._cond = threading.Condition()

    def fail_next(self, count, status=500):
        with self._cond:
            self._failures.extend([status] * count)

    def _answer(self, token, method, body):
        """(status, JSON answer), the way api.telegram.org answers."""
        with self._cond:
            self.calls += 1
            if self._failures:
                status = self._failures.pop(0)
                if status == 429:
                    return 429, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
                                 "parameters": {"retry_after": 1}}
                return status, {"ok": False, "error_code": status, "description": "Internal Server Error"}
        if token not in self.tokens:
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        if method != "sendMessage":
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        if not isinstance(body, dict):
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: invalid JSON"}
        if str(body.get("chat_id")) not in self.chats:
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
        if not str(body.get("text") or "").strip():
            return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
        with self._cond:
            message_id = len(self.messages) + 1
            self.messages.append({"chat_id": str(body["chat_id"]), "text": body["text"], "token": token})
            self._cond.notify_all()
        return 200, {"ok": True, "result": {"message_id": message_id, "date": int(time.time()),
                                            "chat": {"id": body["chat_id"]}, "text": body["text"]}}

    def start(self):
        fake = self

        class Handler(QuietHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    body = None
                match = _PATH.match(self.path)
                if not match:
                    status, answer = 404, {"ok": False, "error_code": 404, "description": "Not Found"}
                else:
                    status, answer = fake._answer(match["token"], match["method"], body)
                self.reply(status, json.dumps(answer).encode(), "application/json")

        self._server = LoopbackServer(Handler, name="fake-telegram")
        return self

    def wait_for(self, count=1, timeout=20):
        """Wait (bounded) until `count` messages arrived; return them."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.messages) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} Telegram message(s), got {len(self.messages)}")
                self._cond.wait(left)
            return list(self.messages)
