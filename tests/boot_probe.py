"""The inside half of tests/boot_check.py: drives the installed node over HTTP from inside
the booted container, one JSON step per stdin line, one JSON answer per stdout line.

It holds the S3 origin (SeaweedFS from the host, tests/peers/seaweed.py) for the whole
boot, so objects and buckets outlive restarts and the upgrade of the node.
"""

import contextlib
import hashlib
import http.client
import io
import json
import os
import socket
import ssl
import sys
import time
import traceback

from tests import certgen
from tests.peers import seaweed as seaweed_peer
from tests.peers.pebble import Pebble

ADMIN = ("admin", "boot check admin passphrase")
USER = ("carol", "carols long boot passphrase")
HOST = "cdn.boot.test"
ADMIN_PORT, PUBLIC_PORT, HTTPS_PORT = 9090, 80, 443
# Outside /root, which the unit hides (ProtectHome=yes): the daemon reads pebble's CA file.
PEBBLE_DIR = "/srv/boot-pebble"
BIG = 3 * 1024 * 1024 + 17   # sent with sendfile from the cache entry (past the in-memory size)


class Api:
    """A logged-in admin API session (cookie), JSON in and out."""

    def __init__(self):
        self.cookie = ""

    def call(self, method: str, path: str, body=None) -> tuple:
        conn = http.client.HTTPConnection("127.0.0.1", ADMIN_PORT, timeout=30)
        headers = {"Host": f"127.0.0.1:{ADMIN_PORT}", "Cookie": self.cookie}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, data, headers)
            response = conn.getresponse()
            raw = response.read()
            cookie = response.getheader("Set-Cookie")
            if cookie:
                self.cookie = cookie.split(";", 1)[0]
            return response.status, json.loads(raw) if raw else None
        finally:
            conn.close()

    def expect(self, status: int, method: str, path: str, body=None):
        got, answer = self.call(method, path, body)
        assert got == status, f"{method} {path}: {got} {answer}"
        return answer


class _HostConnection(http.client.HTTPSConnection):
    """HTTPS to loopback with HOST as the server name (SNI), as a browser would send it."""

    def connect(self):
        sock = socket.create_connection(("127.0.0.1", self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=HOST)


def public(path: str, port: int = PUBLIC_PORT, tls: ssl.SSLContext | None = None, host: str = HOST) -> tuple:
    if tls:
        conn = _HostConnection(HOST, port, timeout=30, context=tls)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def wait_healthy(timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if Api().call("GET", "/healthz")[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "admin /healthz did not answer"
        time.sleep(0.2)


def login(username: str, password: str) -> Api:
    api = Api()
    api.expect(200, "POST", "/api/login", {"username": username, "password": password})
    return api


def cached_twice(path: str, expected: bytes, host: str = HOST) -> str:
    """The object whole, twice; the second answer from the disk cache. Each public worker sees a
    new rule within its state poll (docs/API.md, public workers), so one worker may answer while
    another still says 404: asked until four answers in a row are not 404, that long."""
    deadline = time.monotonic() + 5
    while any(public(path, host=host)[0] == 404 for _ in range(4)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for attempt in ("first", "second"):
        status, headers, body = public(path, host=host)
        assert status == 200 and body == expected, f"{attempt} GET {path}: {status}, {len(body)} bytes"
    assert headers.get("X-Cache") == "HIT", f"second GET {path}: X-Cache {headers.get('X-Cache')}"
    return hashlib.sha256(body).hexdigest()[:12]


class Steps:
    def __init__(self):
        self.s3 = None
        self.pebble = None
        self.runs = 0

    def start_origin(self, _args):
        os.makedirs("/root/origin", exist_ok=True)
        seaweed_peer.weed_path = lambda: "/usr/local/bin/weed"
        self.s3 = seaweed_peer.SeaweedS3("/root/origin").start()
        return "SeaweedFS up"

    def make_data(self, _args):
        wait_healthy()
        Api().expect(201, "POST", "/api/setup", {"username": ADMIN[0], "password": ADMIN[1]})
        admin = login(*ADMIN)
        admin.expect(201, "POST", "/api/users", {"username": USER[0], "password": USER[1], "role": "viewer"})
        token = admin.expect(201, "POST", "/api/me/tokens", {"name": "boot", "scopes": ["routes:write"],
                                                              "password": ADMIN[1]})["secret"]
        admin.expect(201, "POST", "/api/domains", {"host": HOST})
        self.s3.create_bucket("boot")
        bucket = admin.expect(201, "POST", "/api/buckets", self.s3.bucket_definition("boot"))["id"]
        admin.expect(201, "POST", "/api/rules", {"domain": HOST, "path": "/", "bucket": bucket, "images": True})
        self.s3.put_object("boot", "hello.txt", b"hello from the booted unit\n", "text/plain")
        said = cached_twice("/hello.txt", b"hello from the booted unit\n")
        return {"token": token, "bucket": bucket, "said": f"hello.txt cached ({said})"}

    def data_intact(self, args):
        wait_healthy()
        admin = login(*ADMIN)
        users = [u["username"] for u in admin.expect(200, "GET", "/api/users")["users"]]
        assert USER[0] in users, users
        login(*USER)
        assert any(d["host"] == HOST for d in admin.expect(200, "GET", "/api/domains")["domains"])
        assert args["bucket"] in [b["id"] for b in admin.expect(200, "GET", "/api/buckets")["buckets"]]
        Api().expect(200, "POST", "/api/login", {"token": args["token"]})
        status, headers, body = public("/hello.txt")
        assert status == 200 and headers.get("X-Cache") == "HIT", (status, headers)
        return {"said": "users, token, domain, bucket, cached object"}

    def exercise(self, _args):
        """Every path that touches the OS, through the installed unit."""
        wait_healthy()
        admin = login(*ADMIN)
        status, _, body = public("/.well-known/service/check?nonce=bootcheck0123456789abc")
        assert status == 200 and json.loads(body), (status, body)
        big, self.runs = os.urandom(BIG), self.runs + 1   # a new key each run: the cache outlives restarts
        self.s3.put_object("boot", f"big-{self.runs}.bin", big, "application/octet-stream")
        big_sum = cached_twice(f"/big-{self.runs}.bin", big)
        from PIL import Image
        out = io.BytesIO()
        Image.new("RGB", (300, 200), (200, 30, 30)).save(out, "PNG")
        self.s3.put_object("boot", "photo.png", out.getvalue(), "image/png")
        status, headers, body = public("/photo.png?w=60")
        assert status == 200 and headers.get("Content-Type") == "image/png", (status, headers)
        assert Image.open(io.BytesIO(body)).size == (60, 40)
        ca, ca_key = certgen.make_ca()
        leaf, key = certgen.make_leaf([HOST], ca, ca_key)
        admin.expect(200, "POST", "/api/certs/upload", {"host": HOST, "cert_pem": certgen.cert_pem(leaf),
                                                        "key_pem": certgen.key_pem(key)})
        admin.expect(200, "PUT", "/api/https", {"enabled": True, "port": HTTPS_PORT})
        tls = ssl.create_default_context(cadata=certgen.cert_pem(ca))
        status, _, body = public("/hello.txt", HTTPS_PORT, tls)
        assert status == 200 and body == b"hello from the booted unit\n", status
        return {"said": f"verification page, big.bin by sendfile ({big_sum}), image 60x40, HTTPS on 443"}

    def folders(self, args):
        """A folder bucket per {host: [folder, file, text]}: domain, bucket and rule through the API
        as for S3, each file served on port 80 (the second time from the cache)."""
        wait_healthy()
        admin = login(*ADMIN)
        said = []
        for host, (folder, name, text) in args["sites"].items():
            admin.expect(201, "POST", "/api/domains", {"host": host})
            bucket = admin.expect(201, "POST", "/api/buckets", {"name": host, "type": "folder", "path": folder})
            admin.expect(201, "POST", "/api/rules", {"domain": host, "path": "/", "bucket": bucket["id"]})
            cached_twice(f"/{name}", text.encode(), host)
            said.append(f"{folder}/{name} on {host}")
        return "served " + ", ".join(said)

    def access_line(self, args):
        """GET /<marker>, then its access line in `file` (polled: each process appends on its own
        time) and, when given, not in `not_in`."""
        status = public(f"/{args['marker']}")[0]
        wanted, deadline, text = f"path=/{args['marker']} ", time.monotonic() + 10, ""
        while wanted not in text and time.monotonic() < deadline:
            time.sleep(0.2)
            with contextlib.suppress(FileNotFoundError), open(args["file"], encoding="utf-8") as f:
                text = f.read()
        line = next((line for line in text.splitlines() if wanted in line), None)
        assert line and f"host={HOST} " in line and f"status={status} " in line, f"{args['file']}:\n{text[-2000:]}"
        if args.get("not_in"):
            with open(args["not_in"], encoding="utf-8") as f:
                assert wanted not in f.read(), f"the line for /{args['marker']} went to {args['not_in']} too"
        return f"{args['file']}: {line.split(' contentnode.access: ', 1)[1][:80]}"

    def acme_prepare(self, _args):
        """Pebble's DNS (every name is 127.0.0.1) and listener CA, for the unit's environment."""
        os.makedirs(PEBBLE_DIR, mode=0o755, exist_ok=True)
        self.pebble = Pebble(PEBBLE_DIR)
        os.chmod(self.pebble.ca_file, 0o644)
        return {"ca_file": self.pebble.ca_file, "dns": self.pebble.dns.dns_address, "said": "pebble DNS up"}

    def acme_issue(self, _args):
        """HTTP-01 through the public workers on port 80, the certificate then served on 443."""
        wait_healthy()
        self.pebble.start(PUBLIC_PORT)
        admin = login(*ADMIN)
        admin.expect(200, "PUT", "/api/settings", {"acme_directory": self.pebble.directory_url,
                                                   "acme_email": "ops@boot.test"})
        issued = admin.expect(200, "POST", "/api/certs/issue", {"host": HOST})
        assert issued["source"] == "acme" and "Pebble" in issued["issuer"], issued
        tls = ssl.create_default_context(cadata=self.pebble.issuing_root_pem())
        status, _, body = public("/hello.txt", HTTPS_PORT, tls)
        assert status == 200 and body == b"hello from the booted unit\n", status
        self.pebble.stop()
        return {"said": f"issued by {issued['issuer']}, served on 443"}


def main() -> int:
    steps = Steps()
    handlers = {"origin": steps.start_origin, "make_data": steps.make_data,
                "data_intact": steps.data_intact, "exercise": steps.exercise,
                "acme_prepare": steps.acme_prepare, "acme_issue": steps.acme_issue,
                "folders": steps.folders, "access_line": steps.access_line}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = handlers[request.pop("step")](request) or {}
            if isinstance(answer, str):
                answer = {"said": answer}
        except Exception as exc:   # the host prints it and fails the run
            answer = {"error": f"{exc!r}\n{traceback.format_exc()[-2000:]}"}
        print(json.dumps(answer), flush=True)
    if steps.s3 is not None:
        steps.s3.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
