"""The request object handed to routers and handlers: parsed, never a socket."""

import re
from typing import Protocol
from urllib.parse import parse_qsl, unquote

from contentnode.core.text import whole_number

TOO_LONG = 10 ** 18  # a Content-Length of more digits than any body could have
_HOST_HEADER = re.compile(r"(\[[0-9a-f:.]+\]|[^\[\]:@/\s]+)(?::[0-9]{0,5})?")


class Deferred(BaseException):
    """Raised by Request.may_wait() on a public listener's loop thread (http/parking.py): a pool
    thread serves the same Request, its head not read again, from the stage that deferred it
    (http/entry.py, the dispatcher's `resume`). A BaseException, so that no `except Exception`
    on its way answers it 500 or counts it."""


class AuditRecorder(Protocol):
    """The audit log as a request writes to it (core.audit.AuditLog, named by shape:
    http needs nothing else of core's audit module)."""

    def record(self, action: str, target=None, ok: bool = True, detail=None, user=None,
               ip: str | None = None, user_agent: str | None = None) -> object: ...


class Request:
    """What a handler may know about one request.

    The body is read lazily by the router (after the size and type checks), so a
    refused request never has its body read. What starts the same on every request
    is a class default, set on the request only when a dispatcher or handler sets it.
    """

    # set by the dispatcher before any check or handler: what its handlers reach, never the App
    # (an admin handler's api/context.py AdminContext, a public stage's public/context.py PublicContext)
    app: object = None
    audit_log: AuditRecorder | None = None  # set by the admin dispatcher: where audit() writes
    route = None
    raw_body = b""
    body = None
    user = None
    session = None
    pending_session = None
    pending_user = None
    token = None
    api_token = None  # the API token record of a token session
    if_match: int | str | None = None  # If-Match on an if_match row: None, "*" or a revision number
    via_admin_host = False
    visit = None  # on the public port: the Host and path its dispatcher parsed once
    reusable = None  # on the public port: a memory hit public/prepared.py may give again (entries, until, admit)
    deferred_at = None  # the dispatcher's stage that deferred this request to a pool thread (may_wait)
    waiting = None   # what a stage found before it deferred, for its run on the pool thread (public/content.py)

    def __init__(self, handler, port_name: str, scheme: str):
        self._handler = handler
        self.port_name = port_name
        self.scheme = scheme
        self.method = handler.command
        self.target = handler.path
        raw_path, _, self.raw_query = self.target.partition("?")
        self.raw_path = raw_path
        self.path = unquote(raw_path, errors="replace") if "%" in raw_path else raw_path
        self.query_list = parse_qsl(self.raw_query, keep_blank_values=True) if self.raw_query else []
        self.query: dict[str, str] = {}
        for key, value in self.query_list:
            self.query.setdefault(key, value)
        self.headers = handler.headers
        self.peer_ip = handler.client_address[0]
        self.client_ip = self.peer_ip
        self.host = (self.headers.get("Host") or "").strip().lower()
        self.params: dict[str, str] = {}
        self.inline = getattr(handler, "inline", False)  # run by a listener's loop thread: see may_wait()

    def pass_on_interim(self, status: int, fields: list) -> None:
        """Pass an origin's interim answer (1xx) on to the client before the final one (the
        connection's handler writes it)."""
        self._handler.pass_on_interim(status, fields)

    def may_wait(self) -> None:
        """Say that this request's answer may now wait (on an origin, a file, a transform), before
        anything it does leaves a trace. A public listener's loop thread answers only what needs
        no wait: there this raises Deferred and a pool thread goes on with this Request (its handler
        keeps it)."""
        if self.inline:
            self.inline = False
            self._handler.deferred_request = self
            raise Deferred()

    @property
    def user_agent(self) -> str:
        return (self.headers.get("User-Agent") or "")[:200]

    @property
    def content_length(self) -> int | None:
        """The declared body length; None when absent; -1 when malformed."""
        value = self.headers.get("Content-Length")
        if value is None:
            return None
        value = value.strip()
        number = whole_number(value)
        if number is not None:
            return number
        return TOO_LONG if value.isascii() and value.isdigit() else -1

    def announces_body(self) -> bool:
        """A body is announced: a Content-Length above 0, or chunked (most requests name neither)."""
        headers = self.headers   # its names are lower-case: the plain dict lookup
        if not dict.__contains__(headers, "content-length") and not dict.__contains__(headers, "transfer-encoding"):
            return False
        return (self.content_length or 0) > 0 or self.chunked

    @property
    def chunked(self) -> bool:
        return "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()

    def host_name(self) -> str:
        """The Host header without its port, IPv6 brackets kept; "" when it is not
        `name[:port]` or `[v6]:port` exactly (`[::1]evil.example`, `localhost:abc`)."""
        found = _HOST_HEADER.fullmatch(self.host)
        return found.group(1) if found else ""

    def read_body(self) -> bytes:
        """Read the declared body; the router has already bounded its size.

        An `Expect: 100-continue` client is told to go on only now, after every
        check that could refuse it has passed.
        """
        length = self.content_length or 0
        if length <= 0:
            return b""
        if (self.headers.get("Expect") or "").lower() == "100-continue":
            self._handler.send_continue()
        data = self._handler.rfile.read(length)
        if len(data) != length:
            raise ConnectionError("client closed before sending the whole body")
        self.raw_body = data
        return data

    def body_chunks(self, size: int = 65536):
        """The body in pieces as they arrive (Content-Length or chunked), for a handler that passes it
        on without holding it; ConnectionError when the client stops short. The connection closes
        after the answer (the public dispatcher sets that for any request with a body)."""
        if (self.headers.get("Expect") or "").lower() == "100-continue":
            self._handler.send_continue()
        rfile = self._handler.rfile
        if self.chunked:
            yield from _dechunked(rfile, size)
        else:
            left = self.content_length or 0
            while left > 0:
                data = rfile.read1(min(left, size)) if hasattr(rfile, "read1") else rfile.read(min(left, size))
                if not data:
                    raise ConnectionError("client closed before sending the whole body")
                left -= len(data)
                yield data

    def close_after(self) -> None:
        """Close the connection after this response (e.g. when the body was left unread)."""
        self._handler.close_connection = True

    def audit(self, action: str, target=None, ok: bool = True, detail=None) -> None:
        """Record an audit entry for this request's user, client address and user agent.

        An entry made through a token session names the token id (never its secret).
        """
        if self.audit_log is None:
            raise RuntimeError("a request is audited only after the admin dispatcher handed it the audit log")
        if self.api_token is not None:
            detail = {**(detail or {}), "token_id": self.api_token["id"]}
        self.audit_log.record(action, target=target, ok=ok, detail=detail, user=self.user,
                              ip=self.client_ip, user_agent=self.user_agent)


def _dechunked(rfile, size: int):
    """A chunked body's data (RFC 9112 §7.1), trailers read and dropped."""
    while True:
        line = rfile.readline(1024)
        if not line.endswith(b"\n"):
            raise ConnectionError("client sent a malformed chunk")
        try:
            left = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise ConnectionError("client sent a malformed chunk") from None
        if left == 0:
            while rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                pass
            return
        while left > 0:
            data = rfile.read(min(left, size))
            if not data:
                raise ConnectionError("client closed before sending the whole body")
            left -= len(data)
            yield data
        rfile.readline(1024)
