"""What the node writes for an operator: log records and access lines (docs/API.md, "Logs").

Log records and access lines share one shape on stderr: an RFC 3339 time with
its offset, the level, the logger name, the message. When stderr is the
systemd journal (systemd sets $JOURNAL_STREAM to the "device:inode" of the
stream it handed us, see systemd.exec(5)), each line starts with the syslog
priority sd-daemon(3) reads (`<3>` error, `<4>` warning, `<6>` info, `<7>`
debug), so `journalctl -p warning` filters them.

An access line's fields are logfmt (`key=value`, a value quoted and escaped
when it holds anything but plain printable ASCII), each capped in length, so
a client cannot forge a second line or make one line large. Access lines are
the one thing an anonymous client decides the number of: AccessLog writes at
most `access_log_rate` a second per process and counts the rest, which one
line reports when the next second begins.
"""

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from contentnode.config import ConfigError

access_logger = logging.getLogger("contentnode.access")  # its level (log_level) still silences access lines
LEVEL_NAMES = {logging.INFO: "INFO", logging.WARNING: "WARNING"}   # an access line's levels
PRIORITIES = ((logging.ERROR, "<3>"), (logging.WARNING, "<4>"), (logging.INFO, "<6>"), (logging.NOTSET, "<7>"))
FILE_MODE = 0o600
# Caps on what a client sends, in characters before escaping (an escape is at most 4 bytes):
# a whole access line stays under 3,000 bytes.
HOST_CAP, PATH_CAP, AGENT_CAP, METHOD_CAP = 100, 300, 200, 16
_PLAIN = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "=", "\\"}


def is_journal(stream) -> bool:
    """True when `stream` is the journal stream systemd connected (its device and inode match)."""
    expected = os.environ.get("JOURNAL_STREAM", "")
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


def priority(levelno: int) -> str:
    return next(prefix for level, prefix in PRIORITIES if levelno >= level)


def rfc3339(seconds: float) -> str:
    """Local time with its offset: 2026-11-24T14:38:18+01:00."""
    text = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))
    return text[:-2] + ":" + text[-2:]


class Formatter(logging.Formatter):
    """TIME LEVEL name: message, with the journal's priority on every line when asked."""

    def __init__(self, journal: bool = False):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.journal = journal

    def formatTime(self, record, datefmt=None):
        return rfc3339(record.created)

    def format(self, record):
        text = super().format(record)
        if not self.journal:
            return text
        prefix = priority(record.levelno)
        return "\n".join(prefix + line for line in text.split("\n"))  # a traceback's lines keep the level too


def setup(level: str, stream=None) -> None:
    """The process's log records go to stderr in the node's shape (daemon and public workers)."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    handler.setFormatter(Formatter(journal=is_journal(stream)))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def logfmt_value(text: str, cap: int) -> str:
    """A logfmt value: bare when plain, else quoted with \\", \\\\ and \\xNN escapes (no line breaks)."""
    text = text[:cap]
    if text and _PLAIN.issuperset(text):
        return text
    escaped = text.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return f'"{escaped}"'


def path_value(target: str) -> str:
    """A request target as any log line shows it: no query string (it may carry a link's
    signature), capped and escaped."""
    return logfmt_value(target.split("?", 1)[0], PATH_CAP)


def line_parts(port: str, host: str, method: str, target: str, status: int, cache: str, agent: str,
               refused: str = "") -> tuple[str, str, str]:
    """An access line but its client, bytes and duration: the text before, between and after them
    (an answer given again, public/prepared.py, keeps its parts, as they stay the same)."""
    return (f"port={port} host={logfmt_value(host, HOST_CAP)} client=",
            f" method={logfmt_value(method, METHOD_CAP)} path={path_value(target)} status={status} bytes=",
            f" cache={logfmt_value(cache, 16)} ua={logfmt_value(agent, AGENT_CAP)}"
            + (f" refused={logfmt_value(refused, 32)}" if refused else ""))


def access_line(port_name: str, handler, response, seconds: float) -> str:
    """The access line's fields for one answered request (made only for lines within the budget).
    An answer that is given again (`response.head` set) keeps the parts that stay the same
    (its key holds the port, method, target and every field the line shows but the client)."""
    parts = response.line
    if parts is None:
        headers = handler.headers
        cache = "-"
        for name, value in response.headers:
            if name == "X-Cache":
                cache = value
                break
        parts = line_parts(port_name, headers.get("Host") or "", handler.command, handler.path, response.status,
                           cache, headers.get("User-Agent") or "", response.refusal)
        if response.head is not None:
            response.line = parts
    before, between, after = parts
    client = logfmt_value(getattr(handler, "client_ip", handler.client_address[0]), HOST_CAP)
    return f"{before}{client}{between}{getattr(handler, 'bytes_sent', 0)} duration_ms={seconds * 1000:.1f}{after}"


class RequestLog:
    """After each answer (http/server.py's on_request): the request counted by `observe(port, method,
    status, seconds)` (the metrics) and, within the access log's budget, its access line."""

    def __init__(self, observe, access_log: "AccessLog"):
        self._observe, self._access_log = observe, access_log
        self._lines = access_log.enabled   # a start-up value

    def __call__(self, port_name: str, handler, response, seconds: float) -> None:
        self._observe(port_name, handler.command, response.status, seconds)
        if self._lines and access_logger.isEnabledFor(logging.INFO):
            self._access_log.write(access_line, port_name, handler, response, seconds)


class AccessLog:
    """Where access lines go: `setting` is "on" (stderr), "off", or an absolute file path.

    A file is opened for appending (mode 0600 when created) and reopened by
    reopen() (the daemon calls it on SIGHUP, after logrotate moved the file);
    each line is one write(2) on an O_APPEND descriptor, so the daemon and
    its public workers never interleave inside a line.
    """

    def __init__(self, setting: str, max_rate: int, stream=None):
        self.setting = setting
        self.max_rate = max_rate
        self.stream = stream if stream is not None else sys.stderr  # "on": tests may hand another stream
        self.journal = setting == "on" and is_journal(self.stream)
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._second = 0
        self._written = 0
        self._dropped = 0
        self._stamp = (0, "")
        self._to_stream = not self.to_file   # start-up values, read for every line
        if self.to_file:
            self._fd = self._open_at_start()

    @property
    def enabled(self) -> bool:
        return self.setting != "off"

    @property
    def to_file(self) -> bool:
        return self.setting not in ("on", "off")

    def _open(self) -> int:
        return os.open(self.setting, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)

    def _open_at_start(self) -> int:
        """A path the node cannot append to is the operator's to fix: a ConfigError (exit 2),
        which the systemd unit does not restart, rather than a failure worth retrying."""
        try:
            return self._open()
        except OSError as exc:
            raise ConfigError(f"config: access_log {self.setting} cannot be opened for appending: "
                              f"{exc.strerror}; its folder must exist and be writable by the user the "
                              "node runs as (under the systemd unit: a file in /var/log/contentnode, "
                              "the unit's LogsDirectory=), or set access_log to on or off") from None

    def reopen(self) -> None:
        """Open the path again (logrotate moved the old file away); on failure keep the old descriptor."""
        if not self.to_file:
            return
        try:
            fd = self._open()
        except OSError as exc:
            logging.getLogger("contentnode").error("access log %s cannot be reopened: %s; writing on to "
                                                   "the file it had open", self.setting, exc.strerror)
            return
        with self._lock:
            old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def write(self, fields: Callable[..., str], *args) -> None:
        """One access line, within the budget of max_rate a second (0: no budget).

        `fields(*args)` makes the line's text and is called only for a line within the
        budget, outside the lock: a request over it costs a counter, not the
        formatting, and no request waits while another one's line is formatted.
        """
        now = int(time.time())
        with self._lock:
            if now != self._second:
                dropped, self._dropped = self._dropped, 0
                self._second, self._written = now, 0
                if dropped:
                    self._emit(now, logging.WARNING, f"dropped {dropped} access lines over the budget of "
                                                     f"{self.max_rate} a second (access_log_rate)")
            if self.max_rate and self._written >= self.max_rate:
                self._dropped += 1
                return
            self._written += 1
        text = fields(*args)
        with self._lock:
            self._emit(now, logging.INFO, text)

    def _emit(self, now: int, level: int, message: str) -> None:
        if self._stamp[0] != now:
            self._stamp = (now, rfc3339(now))
        line = f"{self._stamp[1]} {LEVEL_NAMES[level]} contentnode.access: {message}\n"
        if self._fd is not None:
            try:
                os.write(self._fd, line.encode("utf-8", "backslashreplace"))
            except OSError:
                pass  # a full disk must not fail the request; the file's owner sees it in df
        elif self._to_stream:
            self.stream.write(priority(level) + line if self.journal else line)
