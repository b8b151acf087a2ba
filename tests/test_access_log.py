"""Access lines against the real daemon (docs/API.md, "Logs"): the fields people grep for, the
journal's priority prefix, access_log off or to a file reopened on SIGHUP (also with public
workers), escaping of what a hostile client sends, and the budget of lines a second."""

import collections
import os
import re
import signal
import socket
import stat
import time

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node
from tests.content_setup import Site
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.two_workers import both_serving, wait_until
from tests.test_startup import run_cli

pytestmark = pytest.mark.daemon_process

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


def access_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "contentnode.access:" in line]


def fields(line: str) -> dict:
    """logfmt key=value pairs, quoted values unescaped one level."""
    found = re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)', line.split("contentnode.access: ", 1)[1])
    return {key: value[1:-1] if value.startswith('"') else value for key, value in found}


def started(tmp_path, env=None, args=()) -> Node:
    node = Node(str(tmp_path), env=env, args=args).start()
    assert node.client().post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    return node


def raw(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_fields_through_a_trusted_proxy(tmp_path):
    node = started(tmp_path)
    try:
        admin = node.client()
        admin.post("/api/login", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        assert admin.put("/api/settings", {"trusted_proxies": ["127.0.0.1/32"]}).status == 200
        answer = node.client("public", host="shop.example.test").get(
            "/nothing/here?sig=secret-signature", headers={"User-Agent": "probe/1.0 (test)",
                                                           "X-Forwarded-For": "203.0.113.9"})
        assert answer.status == 404
        assert wait_until(lambda: any("shop.example.test" in line for line in access_lines(node.log())), 5)
        line = [line for line in access_lines(node.log()) if "shop.example.test" in line][-1]
        assert re.match(TIME + r" INFO contentnode\.access: port=public ", line), line
        got = fields(line)
        assert got["host"] == "shop.example.test" and got["client"] == "203.0.113.9"
        assert got["method"] == "GET" and got["path"] == "/nothing/here" and got["status"] == "404"
        assert int(got["bytes"]) == len(answer.body) + _head_length(answer) and float(got["duration_ms"]) >= 0
        assert got["cache"] == "-" and got["ua"] == "probe/1.0 (test)"
        assert "secret-signature" not in node.log()  # the query string (signatures) stays out
    finally:
        node.close()


def _head_length(answer) -> int:
    """Bytes of the response head as sent: status line, headers, blank line."""
    lines = ["HTTP/1.1 404 Not Found"] + [f"{k}: {v}" for k, v in answer.headers.items()]
    return len("\r\n".join(lines)) + 4


def test_cache_status_miss_then_hit(tmp_path, seaweed):  # noqa: F811
    site = Site(str(tmp_path), seaweed)
    try:
        site.add_rule("/c", prefix="c/", cache_ttl=3600)
        site.put("c/a.txt", b"hello", "text/plain")
        assert site.get("/c/a.txt").status == 200 and site.get("/c/a.txt").status == 200
        assert wait_until(lambda: len([x for x in access_lines(site.node.log()) if "/c/a.txt" in x]) == 2, 5)
        caches = [fields(x)["cache"] for x in access_lines(site.node.log()) if "/c/a.txt" in x]
        # a line is written once its answer is sent: the hit's thread may write before the miss's
        # (docs/API.md, "Logs"), so the two lines are compared as a set
        assert sorted(caches) == ["HIT", "MISS"]
    finally:
        site.close()


def test_journal_priorities_and_the_budget(tmp_path):
    log_path = tmp_path / "daemon.log"
    log_path.touch()
    st = os.stat(log_path)  # Node's stderr is this file: its device and inode, as systemd sets them
    node = Node(str(tmp_path), env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}",
                                    "CONTENTNODE_ACCESS_LOG_RATE": "2"}).start()
    try:
        public = node.client("public", host="j.example.test")
        for _ in range(10):
            public.get("/x")
        time.sleep(1.1)
        public.get("/after")
        assert wait_until(lambda: "/after" in node.log(), 5)
        lines = node.log().splitlines()
        assert all(re.match(r"<[3467]>\S", line) for line in lines if line), lines
        assert any(line.startswith("<6>") and "contentnode.start: admin API on" in line for line in lines)
        written = [line for line in lines if line.startswith("<6>") and "path=/x" in line]
        per_second = collections.Counter(line.split()[0] for line in written)
        assert max(per_second.values()) <= 2, lines  # the budget: 2 a second
        reports = [line for line in lines if "access lines over the budget of 2 a second" in line]
        dropped = sum(int(re.search(r"dropped (\d+) access lines", line).group(1)) for line in reports)
        assert reports and all(line.startswith("<4>") for line in reports), lines
        assert len(written) + dropped == 10, lines  # every line is written or counted
    finally:
        node.close()


def test_no_prefix_when_stderr_is_not_the_journal(tmp_path):
    node = Node(str(tmp_path), env={"JOURNAL_STREAM": "8:12345"}).start()
    try:
        node.client("public").get("/x")
        assert wait_until(lambda: access_lines(node.log()), 5)
        assert not any(line.startswith("<") for line in node.log().splitlines())
    finally:
        node.close()


def test_off_writes_no_access_line(tmp_path):
    node = Node(str(tmp_path), args=("--access-log", "off")).start()
    try:
        assert node.client("public").get("/x").status == 404 and node.client().get("/healthz").status == 200
        time.sleep(0.3)
        assert "admin API on" in node.log() and access_lines(node.log()) == []
    finally:
        node.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_file_reopened_on_sighup(tmp_path, workers):
    path = tmp_path / "logs" / "access.log"
    path.parent.mkdir()
    node = Node(str(tmp_path), env={"CONTENTNODE_ACCESS_LOG": str(path),
                                    "CONTENTNODE_PUBLIC_WORKERS": str(workers)}).start()
    try:
        if workers > 1:
            assert both_serving(node)
        public = node.client("public", host="f.example.test")
        for _ in range(4):
            public.get("/before")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert wait_until(lambda: path.read_text().count("path=/before") == 4, 5)
        os.rename(path, str(path) + ".1")  # what logrotate does, then it sends SIGHUP
        node.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: path.exists(), 5)
        time.sleep(0.3)  # the workers reopen on their own SIGHUP
        for _ in range(4):
            public.get("/after")
        assert wait_until(lambda: path.read_text().count("path=/after") == 4, 5), path.read_text()
        old = (tmp_path / "logs" / "access.log.1").read_text()
        assert old.count("path=/before") == 4 and "/after" not in old and "/before" not in path.read_text()
        assert access_lines(node.log()) == []  # stderr keeps the log records only
        assert node.proc.poll() is None
    finally:
        node.close()


@pytest.mark.parametrize("where", ["missing folder", "a folder"])
def test_a_file_that_cannot_be_opened_is_a_configuration_error(tmp_path, where):
    """Exit 2 (the unit does not restart it) with the path and the reason."""
    path = tmp_path / "missing" / "access.log" if where == "missing folder" else tmp_path
    data = tmp_path / "data"
    result = run_cli("serve", "--data-dir", str(data), "--access-log", str(path), "--admin-port", "0",
                     "--public-port", "0")
    assert result.returncode == 2, result.stderr
    reason = "No such file or directory" if where == "missing folder" else "Is a directory"
    assert f"access_log {path} cannot be opened for appending: {reason}" in result.stderr, result.stderr
    assert "/var/log/contentnode" in result.stderr and "Traceback" not in result.stderr
    assert not (data / "state.json").exists()   # it stopped before the state was made


def test_a_log_inside_a_new_empty_data_dir_does_not_make_it_look_foreign(tmp_path):
    """The log is opened after the data dir is claimed (systemd's StateDirectory is empty at the
    first start): opened first, it was the one foreign file the claim refused, at every start."""
    data = tmp_path / "data"
    data.mkdir()
    for _ in range(2):   # the first start, and a restart with the log already there
        node = Node(str(tmp_path), args=("--access-log", str(data / "access.log"))).start()
        node.stop()
    assert (data / "access.log").exists() and (data / "state.json").exists()


def test_hostile_agent_host_and_path_cannot_forge_or_bloat_lines(tmp_path):
    node = Node(str(tmp_path)).start()
    try:
        # (a bare CR is refused with 400 before any line is written, tests/test_wire_limits.py; a tab
        # is a field value's own character and must not split the line's fields either)
        agent = b'evil" status=200\tfake=1 ' + b"\x1b[31m" + b"A" * 20000
        head = (b'GET /a"b\\c\xff\x1b?q=1 HTTP/1.1\r\nHost: x" y=z\r\nUser-Agent: ' + agent +
                b"\r\nConnection: close\r\n\r\n")
        reply = raw(node.public_port, head)
        assert reply.startswith(b"HTTP/1.1 ")
        assert wait_until(lambda: access_lines(node.log()), 5)
        [line] = access_lines(node.log())
        assert len(line.encode()) < 3000 and "\x1b" not in line and "\t" not in line
        got = fields(line)
        assert got["ua"].startswith('evil\\" status=200\\tfake=1 \\x1b[31mAAA') and got["ua"].endswith("A")
        # the parser percent-encodes raw bytes outside printable ASCII in the target (docs/API.md)
        assert got["host"] == 'x\\" y=z' and got["path"] == '/a\\"b\\\\c%FF%1B'
        assert list(got) == ["port", "host", "client", "method", "path", "status", "bytes", "duration_ms",
                             "cache", "ua"]  # the quoted " status=200" and "fake=1" stayed inside ua
        assert got["status"] == reply.split(b" ")[1].decode()
    finally:
        node.close()


def test_a_line_over_the_budget_is_counted_not_formatted():
    """At many requests a second most lines are over the budget: they must not pay for the
    formatting (bench/profile_hit.py --log-level info shows what it cost per request)."""
    import io

    from contentnode.logs import AccessLog

    stream, made = io.StringIO(), []

    def fields(n):
        def make():
            made.append(n)
            return f"path=/{n}"
        return make

    access = AccessLog("on", 3, stream=stream)
    second = int(time.time())
    while int(time.time()) == second:   # start at the beginning of a second: all ten fall in one
        time.sleep(0.005)
    for n in range(10):
        access.write(fields(n))
    assert made == [0, 1, 2]
    assert [line.split("contentnode.access: ")[1] for line in stream.getvalue().splitlines()] == [
        "path=/0", "path=/1", "path=/2"]
