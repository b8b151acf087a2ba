"""The scripted origin (tests/origin_server.py) does what the origin tests rely on."""

import http.client
import time

from tests.origin_server import OriginServer


def test_scripts_records_and_validators():
    with OriginServer() as origin:
        origin.script("/a.txt", b"hello", headers={"Cache-Control": "max-age=5"}, etag='"v1"')
        origin.script("/dir/*", b"any")
        conn = http.client.HTTPConnection("127.0.0.1", origin.port, timeout=5)
        conn.request("GET", "/a.txt?x=1", headers={"X-Probe": "1"})
        answer = conn.getresponse()
        assert (answer.status, answer.read(), answer.getheader("ETag")) == (200, b"hello", '"v1"')
        conn.request("GET", "/a.txt", headers={"If-None-Match": '"v1"'})
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (304, b"")
        conn.request("POST", "/dir/deep/x", body=b"z" * 1000)
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (200, b"any")
        conn.request("GET", "/nothing")
        assert conn.getresponse().status == 404
        conn.close()
        seen = origin.requests_for("/a.txt")
        assert [s.target for s in seen] == ["/a.txt?x=1", "/a.txt"]
        assert seen[0].headers["x-probe"] == "1"
        assert origin.requests_for("/dir/deep/x")[0].body_length == 1000
        assert origin.connections == 1   # one keep-alive connection carried all four


def test_restart_on_the_same_port_drops_connections_and_trickles():
    origin = OriginServer().start()
    origin.script("/slow", b"x" * 4000, rate=8000, chunked=True)
    conn = http.client.HTTPConnection("127.0.0.1", origin.port, timeout=5)
    started = time.monotonic()
    conn.request("GET", "/slow")
    answer = conn.getresponse()
    assert answer.getheader("Content-Length") is None and len(answer.read()) == 4000
    assert time.monotonic() - started >= 0.4
    port = origin.port
    origin.stop()
    try:
        conn.request("GET", "/slow")
        conn.getresponse()
        raise AssertionError("a stopped origin answered")
    except (ConnectionError, http.client.HTTPException, OSError):
        pass
    origin.start()
    assert origin.port == port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("HEAD", "/slow")
    assert conn.getresponse().status == 200
    origin.stop()
