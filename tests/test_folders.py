"""Folder buckets against the real daemon: a folder inside folder_roots serves through the public port.

The daemon is a process. When the tests run as root, it runs under setpriv
without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: root with those bypasses
file permissions, so a file with mode 000 would be readable and the 403 for
an unreadable file could not be seen. Without them the kernel refuses root
like anyone else (the owner's permission bits apply), which is what a node
running as an unprivileged user meets.

One such daemon serves the module's tests (`folders`); each test gets a site of its own on it (its
own domain, folder and bucket: `site`). A test that moves the node's clock, lists every bucket or
exports the whole node gets a node of its own (`fresh_site`); nodes that only take a restore or
serve a root holding the data dir are built in the test process.
"""

import base64
import http.client
import io
import os
import stat
import time

import pytest
from PIL import Image

from contentnode import config
from tests.inprocess import InProcessNode
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

HOST = "files.example.test"
DROP = "-dac_override,-dac_read_search"
ROOT_WRAPPER = ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}"] if os.geteuid() == 0 else []


class FolderNode:
    """A daemon whose folder roots are <workdir>/roots/a and .../b, its first administrator made, and
    <workdir>/outside/secret.txt beside the roots."""

    def __init__(self, workdir):
        self.roots = [os.path.join(workdir, "roots", name) for name in ("a", "b")]
        for root in self.roots:
            os.makedirs(root)
        self.outside = os.path.join(workdir, "outside")
        os.makedirs(self.outside)
        with open(os.path.join(self.outside, "secret.txt"), "wb") as f:
            f.write(b"TOP SECRET outside the folder\n")
        env = {"CONTENTNODE_FOLDER_ROOTS": os.pathsep.join(self.roots)}
        self.node = Node(workdir, env=env, launcher=ROOT_WRAPPER).start()
        self.admin = self.node.client()
        assert self.admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201


class FolderSite:
    """On a FolderNode: the folder <root a>/<name>, a folder bucket `name` on it and the domain `host`."""

    def __init__(self, folders: FolderNode, name: str = "site", host: str = HOST):
        self.node, self.admin, self.roots, self.outside = folders.node, folders.admin, folders.roots, folders.outside
        self.host = host
        self.folder = os.path.join(self.roots[0], name)   # at the depth the traversal paths below climb from
        os.makedirs(self.folder)
        self.logged = len(self.node.log())
        assert self.admin.post("/api/domains", {"host": host}).status == 201
        self.bucket_id = self.add_bucket(name, self.folder)

    def log(self) -> str:
        """The node's log since this site was made."""
        return self.node.log()[self.logged:]

    def add_bucket(self, name, path):
        response = self.admin.post("/api/buckets", {"name": name, "type": "folder", "path": path})
        assert response.status == 201, response.body
        return response.json["id"]

    def add_rule(self, path, bucket=None, **fields):
        body = {"domain": self.host, "path": path, "bucket": bucket or self.bucket_id, **fields}
        response = self.admin.post("/api/rules", body)
        assert response.status == 201, response.body
        return response.json["id"]

    def write(self, name, data, folder=None):
        path = os.path.join(folder or self.folder, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def write_outside(self, name, data):
        return self.write(name, data, self.outside)

    def get(self, path, headers=None, method="GET"):
        return self.node.client("public", host=self.host).request(method, path, headers=headers)

    def raw_get(self, raw_path):
        """The path sent byte for byte; (status, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.node.public_port, timeout=30)
        try:
            conn.putrequest("GET", raw_path, skip_host=True)
            conn.putheader("Host", self.host)
            conn.endheaders()
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    instance = FolderNode(str(tmp_path_factory.mktemp("folders")))
    yield instance
    instance.node.close()


@pytest.fixture
def site(folders, request):
    """A site of this test's own on the module's node."""
    name = request.node.name.removeprefix("test_")[:40]
    return FolderSite(folders, name, host=f"{name.replace('_', '-')}.files.example.test")


@pytest.fixture
def fresh_site(tmp_path):
    """A site on a node of this test's own."""
    folders = FolderNode(str(tmp_path))
    yield FolderSite(folders)
    folders.node.close()


def test_a_folder_serves_with_type_validators_ranges_and_the_cache(site):
    site.write("hello.txt", b"hello from a folder\n")
    site.write("css/app.css", b"body{}")
    site.add_rule("/")
    first = site.get("/hello.txt")
    assert first.status == 200 and first.body == b"hello from a folder\n"
    assert first.headers["content-type"] == "text/plain; charset=utf-8"
    assert first.headers["x-cache"] == "MISS" and first.headers["etag"].startswith('"')
    assert first.headers["last-modified"].endswith(" GMT")
    again = site.get("/hello.txt")
    assert again.headers["x-cache"] == "HIT" and again.headers["etag"] == first.headers["etag"]
    assert site.get("/css/app.css").headers["content-type"] == "text/css; charset=utf-8"
    part = site.get("/hello.txt", headers={"Range": "bytes=6-9"})
    assert part.status == 206 and part.body == b"from" and part.headers["content-range"] == "bytes 6-9/20"
    assert site.get("/hello.txt", headers={"Range": "bytes=99-"}).status == 416
    assert site.get("/hello.txt", headers={"If-None-Match": first.headers["etag"]}).status == 304
    head = site.get("/hello.txt", method="HEAD")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == "20"


def test_a_file_replaced_on_disk_is_seen_once_the_rule_ttl_has_passed(fresh_site):
    fresh_site.add_rule("/", cache_ttl=5)
    path = fresh_site.write("page.html", b"<p>version 1</p>")
    assert fresh_site.get("/page.html").body == b"<p>version 1</p>"
    tmp = fresh_site.write("page.html.new", b"<p>version 2, longer</p>")
    os.replace(tmp, path)
    cached = fresh_site.get("/page.html")
    assert cached.body == b"<p>version 1</p>" and cached.headers["x-cache"] == "HIT"
    fresh_site.node.set_clock_offset(6)
    deadline = time.monotonic() + 10
    while (fresh := fresh_site.get("/page.html")).body != b"<p>version 2, longer</p>" and time.monotonic() < deadline:
        time.sleep(0.1)   # the daemon re-reads the clock file when it changes
    assert fresh.status == 200 and fresh.body == b"<p>version 2, longer</p>"
    assert fresh.headers["content-type"] == "text/html; charset=utf-8"


def test_missing_is_404_and_unreadable_is_403_never_500(site):
    site.add_rule("/")
    assert site.get("/nope.txt").status == 404
    assert site.get("/nope/deeper.txt").status == 404
    os.makedirs(os.path.join(site.folder, "somedir"))
    assert site.get("/somedir").status == 404            # a folder is not a file (no listing)
    locked = site.write("locked.txt", b"no one may read this")
    os.chmod(locked, 0)
    answer = site.get("/locked.txt")
    assert answer.status == 403 and answer.error_code == "forbidden", answer.body
    assert b"no one may read" not in answer.body
    closed = os.path.join(site.folder, "closed")
    site.write("closed/inner.txt", b"behind a folder without x")
    os.chmod(closed, 0o600)
    assert site.get("/closed/inner.txt").status == 403
    assert "Traceback" not in site.node.log()


def test_traversal_and_encoded_traversal_never_leave_the_folder(site):
    site.add_rule("/")
    site.write("inner.txt", b"inside")
    # /roots/a/<site>/../../../outside/secret.txt, raw, percent-encoded and double-encoded
    for raw in ("/../../../outside/secret.txt", "/%2e%2e/%2e%2e/%2e%2e/outside/secret.txt",
                "/%2E%2E/%2E%2E/%2E%2E/outside/secret.txt", "/.%2e/.%2e/.%2e/outside/secret.txt",
                "/%252e%252e/%252e%252e/%252e%252e/outside/secret.txt", "/inner.txt/../../../outside/secret.txt",
                "/%2e%2e%2f%2e%2e%2f%2e%2e%2foutside/secret.txt", "/..%5c..%5c..%5coutside/secret.txt"):
        status, body = site.raw_get(raw)
        assert status in (400, 404), (raw, status)
        assert b"TOP SECRET" not in body, raw
    # a rule whose prefix ends in ".." maps the rule path itself to key ".."
    site.add_rule("/up", prefix="..")
    assert site.get("/up").status == 404
    assert site.get("/inner.txt").body == b"inside"


def test_symlinks_leaving_the_folder_fifos_and_devices_are_never_served(site):
    site.add_rule("/")
    secret = os.path.join(site.outside, "secret.txt")
    os.symlink(secret, os.path.join(site.folder, "escape.txt"))
    os.symlink(site.outside, os.path.join(site.folder, "outdir"))
    os.symlink("../../../outside/secret.txt", os.path.join(site.folder, "relative.txt"))
    other_root = site.write("other.txt", b"in the other root, not in this folder", site.roots[1])
    os.symlink(other_root, os.path.join(site.folder, "other.txt"))
    os.symlink("/dev/null", os.path.join(site.folder, "null"))
    os.symlink("/dev/zero", os.path.join(site.folder, "zero"))
    os.mkfifo(os.path.join(site.folder, "pipe"))
    os.symlink("pipe", os.path.join(site.folder, "pipe-link"))   # a symlink staying inside, to a FIFO
    for path in ("/escape.txt", "/outdir/secret.txt", "/relative.txt", "/other.txt", "/null", "/zero",
                 "/pipe", "/pipe-link"):
        started = time.monotonic()
        answer = site.get(path)
        assert answer.status == 404, (path, answer.status, answer.body)
        assert time.monotonic() - started < 5, f"{path} hung"   # a FIFO opened for reading would block
        assert b"TOP SECRET" not in answer.body and b"other root" not in answer.body
    if os.geteuid() == 0:   # only root may make a device node: one inside the folder itself
        os.mknod(os.path.join(site.folder, "device"), 0o644 | stat.S_IFCHR, os.makedev(1, 3))
        assert site.get("/device").status == 404
    # a symlink that stays inside the folder is followed
    site.write("real/file.txt", b"reached through a link inside")
    os.symlink("real/file.txt", os.path.join(site.folder, "alias.txt"))
    assert site.get("/alias.txt").body == b"reached through a link inside"


def test_hidden_files_are_never_served_but_well_known_is(site):
    site.add_rule("/")
    site.write(".env", b"SECRET_KEY=hidden")
    site.write(".git/config", b"[remote] hidden")
    site.write("app/.htpasswd", b"admin:hidden")
    site.write(".well-known/security.txt", b"Contact: mailto:security@example.com")
    site.write("app/nested/.well-known/x", b"hidden too")
    os.symlink(".env", os.path.join(site.folder, "env.txt"))   # a visible name leading to a hidden file
    for path in ("/.env", "/.git/config", "/app/.htpasswd", "/%2eenv", "/app/nested/.well-known/x",
                 "/env.txt"):
        answer = site.get(path)
        assert answer.status == 404 and b"hidden" not in answer.body, (path, answer.status)
    assert site.get("/.well-known/security.txt").body == b"Contact: mailto:security@example.com"


def test_a_bucket_path_must_lie_inside_the_roots(fresh_site):
    outside = {"name": "out", "type": "folder", "path": fresh_site.outside}
    for body in (outside, dict(outside, path=fresh_site.roots[0] + "/../../outside"), dict(outside, path="relative/dir"),
                 dict(outside, path="/"), dict(outside, path=fresh_site.folder + "\n")):
        answer = fresh_site.admin.post("/api/buckets", body)
        assert answer.status == 400 and answer.json["error"]["field"] == "path", (body, answer.body)
    os.symlink(fresh_site.outside, os.path.join(fresh_site.roots[0], "sneaky"))
    answer = fresh_site.admin.post("/api/buckets", dict(outside, path=os.path.join(fresh_site.roots[0], "sneaky")))
    assert answer.status == 400 and answer.json["error"]["field"] == "path"
    assert "resolves to" in answer.json["error"]["message"]
    for body, field in (({"name": "x", "type": "folder"}, "path"),
                        ({"name": "x", "type": "folder", "path": fresh_site.folder, "endpoint": "http://127.0.0.1:1"},
                         "endpoint"),
                        ({"name": "x", "type": "ftp", "path": fresh_site.folder}, "type"),
                        ({"name": "x", "path": fresh_site.folder}, "path")):   # type defaults to s3
        answer = fresh_site.admin.post("/api/buckets", body)
        assert answer.status == 400 and answer.json["error"]["field"] == field, (body, answer.body)
    listed = fresh_site.admin.get("/api/buckets").json["buckets"]
    assert [b["name"] for b in listed] == ["site"]
    assert listed[0]["type"] == "folder" and listed[0]["path"] == fresh_site.folder and "secret_key_set" not in listed[0]
    # the second root works too; a change keeps the type and checks the new path
    second = fresh_site.add_bucket("second", fresh_site.roots[1])
    assert fresh_site.admin.put(f"/api/buckets/{second}", {"path": fresh_site.outside}).json["error"]["field"] == "path"
    assert fresh_site.admin.put(f"/api/buckets/{second}", {"type": "s3"}).status == 400
    moved = fresh_site.admin.put(f"/api/buckets/{second}", {"path": fresh_site.folder})
    assert moved.status == 200 and moved.json["path"] == fresh_site.folder


def test_a_folder_that_a_symlink_later_moves_outside_stops_serving(site):
    site.write("v1/index.html", b"release 1")
    link = os.path.join(site.roots[0], "current")
    os.symlink(os.path.join(site.folder, "v1"), link)
    bucket = site.add_bucket("current", link)
    site.add_rule("/", bucket=bucket, cache_ttl=0)
    assert site.get("/index.html").body == b"release 1"
    os.unlink(link)
    os.symlink(site.outside, link)
    site.write_outside("index.html", b"TOP SECRET index")
    answer = site.get("/index.html")
    assert answer.status == 502 and b"TOP SECRET" not in answer.body
    assert "outside the folder_roots" in site.log()


def test_check_and_test_of_a_folder_bucket(site):
    readme = b"read me first, a text long enough to need more than sixty-four bytes"
    site.write("docs/readme.txt", readme)
    check = site.admin.post("/api/buckets/check", {"id": site.bucket_id}).json
    assert check["ok"] is True and [s["name"] for s in check["steps"]] == ["resolve", "open", "list"]
    assert "'docs'" in check["steps"][2]["detail"]
    assert site.admin.get(f"/api/buckets/{site.bucket_id}").json["last_check"]["ok"] is True
    missing = site.admin.post("/api/buckets/check", {"type": "folder", "path": site.roots[0] + "/absent"}).json
    assert missing["ok"] is False and missing["steps"][-1]["code"] == "not_found"
    a_file = site.write("plain-file", b"x", site.roots[1])
    not_dir = site.admin.post("/api/buckets/check", {"type": "folder", "path": a_file}).json
    assert not_dir["steps"][-1]["name"] == "open" and not_dir["steps"][-1]["code"] == "not_directory"
    found = site.admin.post("/api/buckets/test", {"id": site.bucket_id, "key": "docs/readme.txt"}).json
    assert found["ok"] is True and found["status"] == 200 and found["size"] == 68
    assert found["content_type"] == "text/plain; charset=utf-8" and isinstance(found["ms"], float)
    assert base64.b64decode(found["first_bytes"]) == readme[:64]
    gone = site.admin.post("/api/buckets/test", {"id": site.bucket_id, "key": "docs/none.txt"}).json
    assert gone["ok"] is False and gone["status"] == 404 and gone["error"]["code"] == "no_such_key"
    os.symlink(os.path.join(site.outside, "secret.txt"), os.path.join(site.folder, "leak"))
    leak = site.admin.post("/api/buckets/test", {"id": site.bucket_id, "key": "leak"}).json
    assert leak["ok"] is False and leak["status"] == 404
    # probe and diagnose read the same origin
    site.add_rule("/docs", prefix="docs/")
    probe = site.admin.post("/api/probe", {"url": f"http://{site.host}/docs/readme.txt"}).json
    assert probe["origin"]["ok"] is True and probe["origin"]["size"] == 68


def test_signed_links_and_images_from_a_folder(site):
    site.write("private/report.txt", b"for link holders")
    buffer = io.BytesIO()
    Image.new("RGB", (40, 20), (200, 30, 30)).save(buffer, "PNG")
    site.write("pics/red.png", buffer.getvalue())
    site.add_rule("/private", prefix="private/", signed=True)
    site.add_rule("/img", prefix="pics/", images=True)
    assert site.get("/private/report.txt").error_code == "signature_required"
    link = site.admin.post("/api/links", {"url": f"http://{site.host}/private/report.txt", "expires_in": 600}).json["url"]
    signed = site.get(link.split(site.host, 1)[1])
    assert signed.status == 200 and signed.body == b"for link holders"
    small = site.get("/img/red.png?w=10&format=webp")
    assert small.status == 200 and small.headers["content-type"] == "image/webp"
    assert Image.open(io.BytesIO(small.body)).size == (10, 5)
    assert site.get("/img/red.png").headers["content-type"] == "image/png"


def test_backup_round_trip_carries_folder_buckets_and_restore_checks_the_roots(fresh_site, tmp_path):
    fresh_site.write("hello.txt", b"restored and serving")
    fresh_site.add_rule("/")
    exported = fresh_site.admin.post("/api/backup/export", {})
    assert exported.status == 200
    document = exported.json
    assert document["data"]["buckets"][fresh_site.bucket_id]["path"] == fresh_site.folder
    os.makedirs(tmp_path / "other")
    os.makedirs(tmp_path / "narrow")
    other = InProcessNode(str(tmp_path / "other"), env={"CONTENTNODE_FOLDER_ROOTS": os.pathsep.join(fresh_site.roots)}).start()
    try:
        admin = other.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        restored = admin.post("/api/backup/restore", {"backup": document})
        assert restored.status == 200, restored.body
        bucket = admin.get(f"/api/buckets/{fresh_site.bucket_id}").json
        assert bucket["type"] == "folder" and bucket["path"] == fresh_site.folder
        assert other.client("public", host=fresh_site.host).get("/hello.txt").body == b"restored and serving"
    finally:
        other.close()
    # onto a node whose roots do not hold the folder: refused, nothing changed
    narrow = InProcessNode(str(tmp_path / "narrow"), env={"CONTENTNODE_FOLDER_ROOTS": fresh_site.roots[1]}).start()
    try:
        admin = narrow.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        refused = admin.post("/api/backup/restore", {"backup": document})
        assert refused.status == 400 and "folder_roots" in refused.json["error"]["message"], refused.body
        assert admin.get("/api/buckets").json["buckets"] == []
    finally:
        narrow.close()


def test_the_default_root_is_made_in_the_data_dir(tmp_path):
    node = Node(str(tmp_path)).start()
    try:
        root = os.path.join(node.data_dir, "sites")
        assert os.path.isdir(root)
        assert f"folder buckets serve from {root}" in node.log()
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        os.makedirs(os.path.join(root, "www"))
        made = admin.post("/api/buckets", {"name": "www", "type": "folder", "path": os.path.join(root, "www")})
        assert made.status == 201, made.body
        outside = admin.post("/api/buckets", {"name": "data", "type": "folder", "path": node.data_dir})
        assert outside.status == 400 and outside.json["error"]["field"] == "path"
    finally:
        node.close()


def test_a_root_that_holds_the_data_dir_never_serves_the_data_dir(tmp_path):
    workdir = str(tmp_path)
    node = InProcessNode(workdir, env={"CONTENTNODE_FOLDER_ROOTS": workdir}).start()
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        assert admin.post("/api/domains", {"host": HOST}).status == 201
        inside_data = admin.post("/api/buckets", {"name": "data", "type": "folder", "path": node.data_dir})
        assert inside_data.status == 400 and inside_data.json["error"]["field"] == "path"
        whole = admin.post("/api/buckets", {"name": "all", "type": "folder", "path": workdir})
        assert whole.status == 201, whole.body
        assert admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": whole.json["id"]}).status == 201
        public = node.client("public", host=HOST)
        assert public.get("/clock").status == 200                 # beside the data dir: served
        for path in ("/data/state.json", "/data/sessions.json", "/data/audit.jsonl"):
            answer = public.get(path)
            assert answer.status == 404 and b"secret" not in answer.body, path
        os.symlink(os.path.join(node.data_dir, "state.json"), os.path.join(workdir, "state-link"))
        assert public.get("/state-link").status == 404
    finally:
        node.close()


def test_folder_roots_from_the_file_the_environment_and_a_flag(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('folder_roots = ["/srv/a", "relative/b"]\n')
    from_file = config.load(str(toml), {"data_dir": str(tmp_path / "d")}, environ={})
    assert from_file.folder_roots == ["/srv/a", os.path.abspath("relative/b")]
    from_env = config.load(None, {"data_dir": str(tmp_path / "d")}, environ={"CONTENTNODE_FOLDER_ROOTS": "/x:/y"})
    assert from_env.folder_roots == ["/x", "/y"] and from_env.sources["folder_roots"].startswith("environment")
    from_flag = config.load(str(toml), {"data_dir": str(tmp_path / "d"), "folder_roots": "/z"}, environ={})
    assert from_flag.folder_roots == ["/z"]
    default = config.load(None, {"data_dir": str(tmp_path / "d")}, environ={})
    assert default.folder_roots == [str(tmp_path / "d" / "sites")]
    assert config.load(None, {"data_dir": str(tmp_path / "d")}, environ={"CONTENTNODE_FOLDER_ROOTS": ""}).folder_roots == []
    toml.write_text("folder_roots = 3\n")
    with pytest.raises(config.ConfigError, match="folder_roots = 3"):
        config.load(str(toml), {"data_dir": str(tmp_path / "d")}, environ={})
    toml.write_text('folder_roots = ["/ok", ""]\n')
    with pytest.raises(config.ConfigError, match="folder_roots"):
        config.load(str(toml), {"data_dir": str(tmp_path / "d")}, environ={})
