"""Token buckets shared by every public process: one fixed-size table in a file, mmap'd by each.

A rule's `rate_limit` must hold however many public workers serve the port,
so the buckets cannot live in one process's memory. The daemon creates
<data_dir>/ratelimit.table at start (a new one each start: a client's budget
does not outlive the node) and every public worker maps the same file.

Layout: a 16-byte random salt, then SETS sets of WAYS slots; a slot is
three native words: key (uint64, 0 for empty), tokens (float64), stamp (float64). A client of a rule is keyed
by blake2b(salt, rule id, client key) (core/edge_rules.py client_key), so the
file holds no address and nobody outside can aim collisions at one set. The
key picks its set; within it the slot with that key is used, else the one
seen longest ago is taken over (its client starts again with a full bucket:
an eviction errs towards serving). Memory is SETS * WAYS * 24 bytes whatever
the number of clients or rules.

An update locks its set's 96 bytes with fcntl.lockf (a POSIX record lock: the
processes exclude each other per set, not per table) and, inside one process,
a threading lock (record locks are per process, not per thread); a node with
one public process (`shared` false) takes only the threading lock, saving two
system calls per request. Time is CLOCK_MONOTONIC, which is the same for every
process of the machine.
"""

import fcntl
import functools
import hashlib
import math
import mmap
import os
import secrets
import threading
import time

SALT_BYTES = 16
SETS = 16384
WAYS = 4
WORDS = 3                              # a slot: key (uint64), tokens (float64), stamp (float64)
SET_BYTES = WAYS * WORDS * 8
KEYS_REMEMBERED = 4096   # (rule, client) hashes each process keeps
SIZE = SALT_BYTES + SETS * SET_BYTES      # 1.5 MiB: 65,536 clients tracked at once


class RateTable:
    """take(rule_id, client_key, rate, burst) -> 0 when the request may go, else the seconds to wait."""

    def __init__(self, path: str, fresh: bool, clock=time.monotonic, shared: bool = True):
        self.path, self._clock, self._shared = path, clock, shared
        if fresh:
            self._create(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._map = mmap.mmap(self._fd, SIZE)
        self._salt = bytes(self._map[:SALT_BYTES])
        # the slots seen as words: a key compares as one integer, a count reads as one float (no
        # struct packing: this runs on every request of a rule with a rate limit)
        self._keys = memoryview(self._map)[SALT_BYTES:].cast("Q")
        self._values = memoryview(self._map)[SALT_BYTES:].cast("d")
        self._lock = threading.Lock()
        self._slot_of = functools.lru_cache(maxsize=KEYS_REMEMBERED)(self._hash)

    def _hash(self, rule_id: str, client_key: bytes) -> tuple[int, int]:
        """(first word of its set, key): the key's set is picked by the keyed hash, never by the client."""
        digest = hashlib.blake2b(rule_id.encode() + b"\0" + client_key, digest_size=8, key=self._salt).digest()
        key = int.from_bytes(digest, "little") or 1   # 0 marks an empty slot
        return key % SETS * WAYS * WORDS, key

    @staticmethod
    def _create(path: str) -> None:
        """A new table, put in place whole (a worker never maps a half-written one)."""
        temp = f"{path}.new"
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            os.pwrite(fd, secrets.token_bytes(SALT_BYTES), 0)
        finally:
            os.close(fd)
        os.replace(temp, path)

    def take(self, rule_id: str, client_key: bytes, rate: int, burst: int) -> int:
        """Spend one token of this client's bucket for the rule: 0, or whole seconds until one is back."""
        first, key = self._slot_of(rule_id, client_key)
        with self._lock:
            if not self._shared:
                return self._spend(first, key, rate, burst)
            start = SALT_BYTES + first * 8
            fcntl.lockf(self._fd, fcntl.LOCK_EX, SET_BYTES, start)
            try:
                return self._spend(first, key, rate, burst)
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, SET_BYTES, start)

    def _spend(self, first: int, key: int, rate: int, burst: int) -> int:
        now = self._clock()
        keys, values = self._keys, self._values
        slot = first if keys[first] == key else self._slot_in_set(first, key)
        if slot >= 0:
            tokens = values[slot + 1]
            elapsed = now - values[slot + 2]
            if elapsed > 0:
                tokens += elapsed * rate
                if tokens > burst:
                    tokens = float(burst)
        else:   # the empty (stamp 0) or the longest unseen slot is taken over: a full bucket
            slot = self._oldest_in_set(first)
            keys[slot], tokens = key, float(burst)
        values[slot + 2] = now
        if tokens >= 1.0:
            values[slot + 1] = tokens - 1.0
            return 0
        values[slot + 1] = tokens
        return max(1, math.ceil((1.0 - tokens) / rate))

    def _slot_in_set(self, first: int, key: int) -> int:
        keys = self._keys
        for slot in range(first + WORDS, first + WAYS * WORDS, WORDS):
            if keys[slot] == key:
                return slot
        return -1

    def _oldest_in_set(self, first: int) -> int:
        values = self._values
        return min(range(first, first + WAYS * WORDS, WORDS), key=lambda slot: values[slot + 2])

    def close(self) -> None:
        self._keys.release()
        self._values.release()
        self._map.close()
        os.close(self._fd)
