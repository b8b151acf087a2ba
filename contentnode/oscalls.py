"""OS calls the node can live without: a refused one is logged once and the node runs on.

A sandbox may refuse a call that only makes the node faster or tidier: a systemd
unit's `SystemCallFilter=` with `SystemCallErrorNumber=EPERM`, a container's
seccomp profile, a file system without record locks. Such a call then fails with
EPERM, ENOSYS, ENOLCK or EOPNOTSUPP, and the node must not end a thread or the
process over it: each caller says what the node does without the call, the first
refusal of each call in a process is logged with that, later ones are silent
(docs/API.md, "Refused OS calls").

EACCES is not in the set: `fcntl.lockf` answers it for a lock another process
holds, and `open` for a file mode; those are the caller's ordinary errors.
"""

import errno
import logging
import os
import threading

log = logging.getLogger("contentnode")

REFUSED_ERRNOS = frozenset({errno.EPERM, errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})

_lock = threading.Lock()
_refused: set[str] = set()   # the calls this process has seen refused (a fact about the process)


def is_refusal(exc: BaseException) -> bool:
    """True when `exc` says the OS (or a sandbox) will not do the call at all."""
    return isinstance(exc, OSError) and exc.errno in REFUSED_ERRNOS


def note_refused(call: str, code: int | None, without: str) -> None:
    """Log the first refusal of `call` in this process, with what the node does instead."""
    with _lock:
        if call in _refused:
            return
        _refused.add(call)
    reason = errno.errorcode.get(code or 0, str(code))
    log.warning("the OS refused %s (%s) in process %d: %s", call, reason, os.getpid(), without)


def was_refused(call: str) -> bool:
    """A call refused once stays refused for this process: callers skip straight to the fallback."""
    return call in _refused


def attempt(call: str, without: str, fn, *args):
    """`fn(*args)`, or None when the OS refuses it (logged once); any other error is raised."""
    try:
        return fn(*args)
    except OSError as exc:
        if not is_refusal(exc):
            raise
        note_refused(call, exc.errno, without)
        return None
