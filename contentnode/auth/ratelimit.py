"""Failure counting for login and 2FA: N failures in a window lock the key for a while.

Keys are "user:<account>" (and "2fa:<account>"), locked after the policy's
threshold, and "ip:<address group>", locked only after ADDRESS_FACTOR times as many:
scripts and people behind one address share it, so one account's wrong
passwords must not lock the others out, while spraying many accounts from one
address still hits a limit.

Kept in memory on purpose: a restart clears lockouts, which an operator who
restarts the daemon expects, and nothing is written on the hot failure path.
"""

import ipaddress
import threading
from collections import OrderedDict, deque

MAX_KEYS = 10000
ADDRESS_FACTOR = 4  # an address is locked after 4 x the account threshold (20 by default)


def address_group(ip: str) -> str:
    """What counts as one client: an IPv4 address, or an IPv6 address's /64. A subscriber is
    usually handed a whole /64, so counting single IPv6 addresses would let one client take a
    fresh address for every try. An IPv4-mapped address counts as its IPv4 address."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(getattr(address, "ipv4_mapped", None) or address)


def address_key(ip: str) -> str:
    """The key counting failures from one client address (its group: an IPv6 /64)."""
    return f"ip:{address_group(ip)}"


def password_key(username: str) -> str:
    """The key counting wrong passwords for one account (any spelling of its name)."""
    return f"user:{username.strip().lower()}"


def token_key(ip: str) -> str:
    """The key counting wrong API tokens from one client address; never an account's key."""
    return f"token-ip:{address_group(ip)}"


def second_factor_key(username: str) -> str:
    """The key counting wrong 2FA codes for one account."""
    return f"2fa:{username.strip().lower()}"


class FailureLimiter:
    def __init__(self, threshold: int = 5, window: float = 900.0):
        self.threshold = threshold
        self.window = window
        self._failures: OrderedDict[str, deque] = OrderedDict()  # key -> deque of failure times
        self._lock = threading.Lock()

    def configure(self, threshold: int, window: float) -> None:
        self.threshold, self.window = threshold, window

    def threshold_for(self, key: str) -> int:
        """Failures in the window that lock `key`: an address tolerates more than an account."""
        return self.threshold * ADDRESS_FACTOR if key.startswith("ip:") else self.threshold

    def retry_after(self, key: str, now: float) -> float:
        """Seconds until `key` may try again; 0 when it may try now."""
        with self._lock:
            return self._retry_after(key, now)

    def _retry_after(self, key: str, now: float) -> float:
        times = self._failures.get(key)
        if not times:
            return 0.0
        while times and times[0] <= now - self.window:
            times.popleft()
        threshold = self.threshold_for(key)
        if len(times) < threshold:
            return 0.0
        return times[-threshold] + self.window - now

    def reserve(self, keys, now: float) -> float:
        """Check every key and, when none is locked, count one attempt on each at once.

        Counting before the (slow) password check, not after it, is what makes the
        limit hold against many attempts sent together: otherwise all of them pass
        the check before the first failure is counted. Returns 0 when reserved, else
        the seconds to wait (nothing counted). A success gives the attempt back
        with `release`; a failure simply keeps it.
        """
        with self._lock:
            wait = max(self._retry_after(key, now) for key in keys)
            if wait > 0:
                return wait
            for key in keys:
                self._append(key, now)
            return 0.0

    def release(self, keys, stamp: float) -> None:
        """Give back the attempts `reserve` counted at `stamp` (the attempt succeeded)."""
        with self._lock:
            for key in keys:
                times = self._failures.get(key)
                if times is not None:
                    try:
                        times.remove(stamp)
                    except ValueError:
                        pass

    def position(self, key: str, stamp: float) -> int:
        """Which failure of `key`'s window the attempt reserved at `stamp` is (1 = first; 0 = gone)."""
        with self._lock:
            times = list(self._failures.get(key) or ())
        return times.index(stamp) + 1 if stamp in times else 0

    def _append(self, key: str, now: float) -> int:
        times = self._failures.pop(key, None) or deque()
        times.append(now)
        while times and times[0] <= now - self.window:
            times.popleft()
        self._failures[key] = times
        while len(self._failures) > MAX_KEYS:
            self._failures.popitem(last=False)
        return len(times)

    def fail(self, key: str, now: float) -> int:
        """Count a failure; returns how many failures the key has in the window."""
        with self._lock:
            return self._append(key, now)

    def clear(self, key: str) -> bool:
        with self._lock:
            return self._failures.pop(key, None) is not None
