"""HTTP-01 on every node: the issuer publishes its answers, the others read them through.

The CA may send its HTTP-01 request to any node that the name resolves to,
while only the issuer holds the order. The issuer writes each answer to the
bucket (`<prefix>acme-challenges/<token>.json`) before it tells the CA to
validate, signed with the fleet's current signing key: anyone who can write to
the bucket could otherwise plant answers and get a certificate for the fleet's
names issued to an ACME account of their own. Another node that has no answer
for a token reads the object through on the miss, checks the signature, the
token and the expiry, and caches the answer; a miss is not remembered, so an
answer published after a first miss is served at the next request.

What an anonymous client can make a node do here is bounded and cannot starve
a real token (see ReadThrough): only tokens of the shape ACME uses are looked
up, a token not in the folder's listing costs a read only within its client's
and the node's budgets, a listed one is always read, and at most
CACHE_ENTRIES answers are kept, apart from misses.
"""

import logging
import re
import threading
import time
from collections import OrderedDict

from contentnode.core.acme import AcmeError
from contentnode.core.s3_errors import S3Error
from contentnode.fleet.wire import canonical, loads

log = logging.getLogger("contentnode.fleet.challenges")

FOLDER = "acme-challenges/"
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,128}")  # RFC 8555 8.3: base64url, at least 128 bits of entropy
THUMBPRINT = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a SHA-256 (RFC 7638)
LIFETIME = 600  # seconds an answer stays valid: an order's authorisations finish well within it
CACHE_ENTRIES = 256          # answers kept (misses are not)
LOOKUPS_PER_SECOND = 20      # reads of tokens not listed yet, the whole node ...
CLIENT_LOOKUPS = 2           # ... and one client address
BUDGETS_KEPT = 4096          # client addresses whose budget is remembered (the oldest forgotten)
LIST_SECONDS = 0.25          # the listing of the tokens that exist is at most this old when a token is missing
LIST_MAX = 1000
OBJECT_MAX_BYTES = 4096
CONTENT_TYPE = "application/json"


def object_key(prefix: str, token: str) -> str:
    return f"{prefix}{FOLDER}{token}.json"


def _signed_bytes(fleet_id: str, token: str, key_authorization: str, expires_at: int) -> bytes:
    return canonical({"fleet_id": fleet_id, "token": token, "key_authorization": key_authorization,
                      "expires_at": expires_at, "purpose": "acme-http-01"})


def encode(fleet_id: str, token: str, key_authorization: str, expires_at: int, sign) -> bytes:
    """The object the issuer writes; `sign(bytes) -> signature text` uses the fleet's current key."""
    signature = sign(_signed_bytes(fleet_id, token, key_authorization, expires_at))
    return canonical({"fleet_id": fleet_id, "token": token, "key_authorization": key_authorization,
                      "expires_at": expires_at, "signature": signature})


def decode(body: bytes, fleet_id: str, token: str, verify, now: float) -> str | None:
    """The key authorization in `body` when it is this fleet's, for `token`, unexpired and
    signed by a key `verify(data, signature text) -> bool` accepts; None otherwise."""
    try:
        doc = loads(body)
        key_authorization, expires_at, signature = doc["key_authorization"], doc["expires_at"], doc["signature"]
        signed = _signed_bytes(doc["fleet_id"], doc["token"], key_authorization, expires_at)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    if doc["fleet_id"] != fleet_id or doc["token"] != token or not isinstance(expires_at, int):
        return None
    prefix, _, thumbprint = str(key_authorization).partition(".")
    if prefix != token or not THUMBPRINT.fullmatch(thumbprint) or expires_at <= now:
        return None
    return key_authorization if verify(signed, signature) else None


class PublishingChallenges:
    """The issuer's challenge store: each answer kept locally (its own public port) and
    written to the bucket before the CA is asked to validate; removed from both after.

    `bucket()` answers (client, prefix, fleet_id, sign) while the node is a fleet
    primary, else None (a standalone node keeps its answers to itself)."""

    def __init__(self, local, bucket, clock):
        self.local, self.bucket, self.clock = local, bucket, clock

    def put(self, token: str, key_authorization: str):
        self.local.put(token, key_authorization)
        target = self.bucket()
        if target is None or not TOKEN.fullmatch(token):
            return
        client, prefix, fleet_id, sign = target
        expires_at = int(self.clock()) + LIFETIME
        try:
            client.put_object(object_key(prefix, token),
                              encode(fleet_id, token, key_authorization, expires_at, sign), CONTENT_TYPE)
        except S3Error as exc:  # the other nodes could not answer the CA: do not ask it to validate
            raise AcmeError("challenge", f"the answer could not be published to the fleet's bucket: "
                                         f"{exc.message}") from None

    def get(self, token: str):
        return self.local.get(token)

    def remove(self, token: str):
        self.local.remove(token)
        target = self.bucket()
        if target is None or not TOKEN.fullmatch(token):
            return
        try:
            target[0].delete_object(object_key(target[1], token))
        except S3Error as exc:  # the answer expires by itself; an order must not fail over it
            log.warning("could not remove the published ACME challenge %s: %s", token, exc.message)


class ReadThrough:
    """Answers for tokens this node never saw, read from the bucket (bounded, cached).

    A flood of made-up tokens must not make a node answer 404 for a real one, so:
    the tokens that exist are known from a LIST of the folder (refreshed at most
    every LIST_SECONDS, one at a time), and only a listed token is read, whoever
    asks; a token not listed yet (published since the last LIST) is read only
    within its client's budget (CLIENT_LOOKUPS a second per address) and the
    node's (LOOKUPS_PER_SECOND); answers are cached apart from misses, which are
    not kept at all, so misses never push an answer out.

    `bucket()` answers (client, prefix, fleet_id, verify) while the node is in a fleet,
    else None; `clock()` is epoch seconds."""

    def __init__(self, bucket, clock) -> None:
        self.bucket, self.clock = bucket, clock
        self._answers: OrderedDict = OrderedDict()  # token -> (answer, good until: monotonic)
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Event] = {}
        self._listed: frozenset = frozenset()
        self._listed_at = float("-inf")
        self._listing: threading.Event | None = None
        self._budgets: OrderedDict = OrderedDict()  # client address -> (second, reads in it); "" the node's

    def get(self, token: str, client: str = "") -> str | None:
        if not TOKEN.fullmatch(token):
            return None
        target = self.bucket()
        if target is None:
            return None
        with self._lock:
            cached = self._answers.get(token)
            if cached is not None and cached[1] > time.monotonic():
                return cached[0]
        if token not in self._tokens(target):
            with self._lock:
                if not (self._admit(client, CLIENT_LOOKUPS) and self._admit("", LOOKUPS_PER_SECOND)):
                    return None
        return self._read(target, token)

    def _tokens(self, target) -> frozenset:
        """The tokens in the bucket's folder, listed again when the listing is older than LIST_SECONDS
        (one LIST at a time: the others use the listing they have)."""
        with self._lock:
            if time.monotonic() - self._listed_at < LIST_SECONDS:
                return self._listed
            running = self._listing
            if running is None:
                mine = self._listing = threading.Event()
        if running is not None:   # another request is listing: use what it finds
            running.wait(target[0].timeout + 1)
            return self._listed
        client, prefix = target[0], target[1]
        try:
            keys = client.list_objects(prefix=prefix + FOLDER, max_keys=LIST_MAX).keys
            listed = frozenset(k["key"][len(prefix + FOLDER):-5] for k in keys if k["key"].endswith(".json"))
        except S3Error as exc:
            log.warning("could not list the ACME challenges in the bucket: %s", exc.message)
            listed = self._listed
        with self._lock:
            self._listed, self._listed_at, self._listing = listed, time.monotonic(), None
        mine.set()
        return listed

    def _read(self, target, token: str) -> str | None:
        """One bucket read per token at a time (the CA's vantage points asking at once share it)."""
        while True:
            with self._lock:
                cached = self._answers.get(token)
                if cached is not None and cached[1] > time.monotonic():
                    return cached[0]
                waiting = self._inflight.get(token)
                if waiting is None:
                    done = self._inflight[token] = threading.Event()
                    break
            waiting.wait(target[0].timeout + 1)
            if not waiting.is_set():
                return None
        try:
            answer, good_for = self._lookup(target, token)
            if answer is not None:
                with self._lock:
                    self._answers[token] = (answer, time.monotonic() + good_for)
                    self._answers.move_to_end(token)
                    while len(self._answers) > CACHE_ENTRIES:
                        self._answers.popitem(last=False)
            return answer
        finally:
            with self._lock:
                self._inflight.pop(token, None)
            done.set()

    def _admit(self, who: str, per_second: int) -> bool:
        """At most `per_second` reads a second for `who` (called with the lock held)."""
        second = float(int(time.monotonic()))
        start, count = self._budgets.pop(who, (second, 0))
        if start != second:
            start, count = second, 0
        self._budgets[who] = (start, count + (count < per_second))
        while len(self._budgets) > BUDGETS_KEPT:
            self._budgets.popitem(last=False)
        return count < per_second

    def _lookup(self, target, token: str) -> tuple:
        client, prefix, fleet_id, verify = target
        try:
            fetched = client.get_bytes(object_key(prefix, token), max_bytes=OBJECT_MAX_BYTES)
        except S3Error as exc:
            log.warning("could not read the ACME challenge %s from the bucket: %s", token, exc.message)
            return None, 0.0
        now = self.clock()
        answer = None if fetched is None or fetched.body is None else decode(fetched.body, fleet_id, token,
                                                                             verify, now)
        if answer is None:
            return None, 0.0
        expires_at = loads(fetched.body)["expires_at"]
        return answer, max(1.0, min(60.0, expires_at - now))
