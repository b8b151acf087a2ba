"""The open files limit a public listener needs for its connections.

A listener holds up to max_connections sockets (16,384 by default); the
usual soft RLIMIT_NOFILE of 1,024 would refuse most of them, so each public
listener raises the soft limit toward the hard one (the shipped unit sets
LimitNOFILE) and says in the log when it cannot reach what it needs.
"""

import logging
import resource

from contentnode import oscalls

log = logging.getLogger("contentnode.http")

OWN_FDS = 64   # descriptors a process needs besides its connections (files, pipes, the ledger)


def ensure_open_files(wanted: int) -> None:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit when `wanted` needs more (logged)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    target = max(wanted, soft) if hard == resource.RLIM_INFINITY else hard
    oscalls.attempt("setrlimit", "the open files limit stays as it was set",
                    resource.setrlimit, resource.RLIMIT_NOFILE, (target, hard))
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if now > soft:
        log.info("open files limit raised from %d to %d (a public listener holds up to %d connections)",
                 soft, now, wanted - OWN_FDS)
    if now < wanted:
        log.warning("the open files limit is %d: a public listener holds fewer than its %d connections; "
                    "raise LimitNOFILE (the shipped unit sets 65536)", now, wanted - OWN_FDS)
