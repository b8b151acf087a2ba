"""An interim answer for a client whose socket does not take it at once (it does not read) is never
waited for: it is kept and leaves with the final answer (http/connection.py pass_on_interim)."""

import socket

import pytest

from contentnode.http.connection import RequestHandler
from contentnode.http.sockio import SocketWriter


def _handler(sock, version: str) -> RequestHandler:
    handler = RequestHandler.__new__(RequestHandler)
    handler.connection, handler.wfile, handler.request_version = sock, SocketWriter(sock), version
    handler.close_connection = False
    return handler


@pytest.fixture
def full_socket():
    """Our end of a loopback TCP connection whose send buffer is full: the other end never reads."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    ours.setblocking(False)
    for size in (4096, 256, 16, 1):   # down to the last byte it takes: a small head finds no room either
        try:
            while True:
                ours.send(b"x" * size)
        except BlockingIOError:
            pass
    ours.settimeout(5)   # a write that waited would fail after this, not hang the test
    yield ours
    ours.close()
    theirs.close()


def test_an_interim_answer_the_socket_cannot_take_is_kept_for_the_final_answer(full_socket):
    handler = _handler(full_socket, "HTTP/1.1")
    handler.pass_on_interim(103, [("Link", "</s.css>; rel=preload")])
    handler.pass_on_interim(103, [("Link", "</t.js>; rel=preload")])
    assert handler.interim_unsent == (b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                                      b"HTTP/1.1 103 Early Hints\r\nLink: </t.js>; rel=preload\r\n\r\n")
    assert not handler.close_connection


def test_an_interim_answer_goes_at_once_to_a_socket_that_takes_it_and_never_to_http_1_0():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        handler = _handler(ours, "HTTP/1.1")
        handler.pass_on_interim(100, [])
        assert theirs.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n" and handler.interim_unsent == b""
        older = _handler(ours, "HTTP/1.0")
        older.pass_on_interim(103, [("Link", "</s.css>")])
        assert older.interim_unsent == b""
        theirs.setblocking(False)
        with pytest.raises(BlockingIOError):
            theirs.recv(100)
