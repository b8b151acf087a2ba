"""Responses: status, headers and a body whose length is always known.

The single write path in http/server.py sends these; it always sets
Content-Length, so keep-alive never depends on closing the connection.
A body is bytes, a FileBody or a StreamBody (core/bodies.py).
"""

import json
from dataclasses import dataclass, field
from collections.abc import Callable

from contentnode.core.bodies import FileBody, StreamBody


__all__ = ["FileBody", "StreamBody", "Response", "json_body", "json_response", "created", "no_content"]


@dataclass
class Response:
    status: int = 200
    headers: list = field(default_factory=list)  # [(name, value)]
    body: bytes | FileBody | StreamBody = b""
    head_only: bool = False  # a HEAD answer: headers describe a body that is not sent
    refusal: str = ""        # the error code of an edge refusal (public/edge_guard.py), for the access line
    # an answer given again (public/prepared.py): `head` is the head write() made for it the first time,
    # sent as is while the connection stays open; `keep` is called with that head once it is made
    head: bytes | None = None
    keep: Callable[[bytes], None] | None = None
    line: tuple[str, str, str] | None = None   # its access line's parts that stay the same (logs.py access_line)

    @property
    def length(self) -> int | None:
        """The body's length; None for a stream of unannounced length (sent until the connection closes)."""
        return len(self.body) if isinstance(self.body, bytes) else self.body.length

    def header(self, name: str) -> str | None:
        lower = name.lower()
        for key, value in self.headers:
            if key.lower() == lower:
                return value
        return None


def json_body(obj) -> bytes:
    """Compact UTF-8 JSON; text that is not valid Unicode (a lone surrogate) is \\u-escaped instead."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def json_response(obj, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON answer; one whose body is a revisioned object (a whole-number "revision"
    member at the top) carries ETag: "<revision>" for the client's If-Match."""
    body = json_body(obj)
    hdrs = [("Content-Type", "application/json"), ("Cache-Control", "no-store")]
    revision = obj.get("revision") if isinstance(obj, dict) else None
    if type(revision) is int and status < 300:
        hdrs.append(("ETag", f'"{revision}"'))
    hdrs += list((headers or {}).items())
    return Response(status, hdrs, body)


def created(obj) -> Response:
    return json_response(obj, 201)


def no_content(headers: dict | None = None) -> Response:
    return Response(204, list((headers or {}).items()), b"")
