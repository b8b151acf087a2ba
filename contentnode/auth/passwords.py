"""Password hashing with argon2id, bounded so a burst of logins cannot exhaust memory.

Each hash takes `memory_kib` of RAM; a semaphore caps how many run at once.
An unknown user is verified against a dummy hash so it costs the same time
as a known one.
"""

import ctypes
import os
import threading
from functools import lru_cache

from argon2 import PasswordHasher as _Argon2, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MAX_LENGTH = 1024
M_MMAP_THRESHOLD = -3  # glibc mallopt parameter


def return_hash_memory_to_os() -> None:
    """Have glibc give each hash's memory back when the hash is done.

    argon2 allocates `memory_kib` per hash. After the first large free glibc
    raises its mmap threshold and keeps later blocks in per-thread arenas, so
    resident memory grows by one hash's worth per worker thread that ever
    hashed (226 MB after 24 logins, measured). A fixed threshold keeps blocks
    this large mmapped, so they are unmapped on free. No-op off glibc.
    """
    try:
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    except (OSError, AttributeError):
        pass


class PasswordHasher:
    def __init__(self, memory_kib: int = 19456, time_cost: int = 2, max_concurrent: int = 2):
        self._argon = _Argon2(time_cost=time_cost, memory_cost=memory_kib, parallelism=1, type=Type.ID)
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._dummy = self.hash(os.urandom(16).hex())

    def hash(self, password: str) -> str:
        with self._slots:
            return self._argon.hash(password)

    def verify(self, stored_hash: str | None, password: str) -> bool:
        """True when `password` matches; a missing hash costs the same as a wrong one.

        Text no UTF-8 can hold (a lone surrogate sent as "\ud800" in JSON) is simply a
        wrong password, at the same cost: no new password may contain it.
        """
        given = password.encode("utf-8", "surrogatepass") if isinstance(password, str) else password
        with self._slots:
            try:
                return self._argon.verify(stored_hash or self._dummy, given) and stored_hash is not None
            except (VerifyMismatchError, VerificationError, InvalidHashError):
                return False


@lru_cache(maxsize=1)
def _common_passwords() -> frozenset:
    path = os.path.join(os.path.dirname(__file__), "common-passwords.txt")
    with open(path, encoding="utf-8") as f:
        return frozenset(line.strip().lower() for line in f if line.strip())


def password_problem(password, username: str, min_length: int) -> str | None:
    """Why this new password is refused, or None. No composition rules, never truncated."""
    if not isinstance(password, str):
        return "the password must be a string"
    try:
        password.encode("utf-8")
    except UnicodeEncodeError:
        return "the password holds an unpaired surrogate (not valid Unicode text)"
    if len(password) < min_length:
        return f"the password must be at least {min_length} characters long"
    if len(password) > MAX_LENGTH:
        return f"the password must be at most {MAX_LENGTH} characters long"
    if password.strip().lower() == (username or "").strip().lower():
        return "the password must not be the username"
    if password.lower() in _common_passwords():
        return "this password is one of the most common ones; choose another"
    return None
