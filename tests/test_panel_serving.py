"""The admin port serves the panel's static files: GET / and /panel/{path...},
from the set loaded at start, with the headers of docs/API.md, "Panel", ETags and 304s, and
nothing outside that set (no path traversal)."""

import configparser
import glob
import os

import pytest

from contentnode.core.static_files import MEDIA_TYPES, load_panel_files
from contentnode.http.errors import ApiError
from contentnode.http.router import Route, RouteTable
from tests.node import ROOT, Node

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
FILES = load_panel_files()  # names for the parameters; contents as the daemon read them, below


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One daemon for the module (these tests only read); FILES is reloaded as it starts, so a
    file edited since collection is compared with what the daemon actually loaded."""
    instance = Node(str(tmp_path_factory.mktemp("panel-serving"))).start()
    FILES.update(load_panel_files())
    yield instance
    instance.kill()


def assert_panel_headers(response):
    assert response.headers.get("content-security-policy") == CSP, response.headers
    assert response.headers.get("x-content-type-options") == "nosniff"
    assert response.headers.get("referrer-policy") == "no-referrer"


def test_the_loaded_set_is_the_panel_and_only_servable_types():
    assert "index.html" in FILES and "js/app.js" in FILES and "css/panel.css" in FILES
    assert not [name for name in FILES if name.endswith((".md", "LICENSE"))]
    for name, file in FILES.items():
        assert file.media_type == MEDIA_TYPES["." + name.rsplit(".", 1)[1]]
        assert file.etag.startswith('"') and file.etag.endswith('"') and len(file.etag) > 10


def test_every_served_file_ships_as_package_data():
    """An installed node (a wheel, not this checkout) must hold every file the checkout serves."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    package = os.path.join(ROOT, "contentnode")
    shipped = set()
    for pattern in config["options.package_data"]["contentnode"].split(","):
        shipped.update(os.path.relpath(p, package) for p in glob.glob(os.path.join(package, pattern.strip())))
    missing = sorted(name for name in FILES if f"panel/{name}" not in shipped)
    assert missing == [], f"setup.cfg package_data leaves out: {missing}"


def test_root_is_index_html_without_a_session(node):
    response = node.client().get("/")
    assert response.status == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["etag"] == FILES["index.html"].etag
    assert response.body == FILES["index.html"].body
    assert_panel_headers(response)


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_file_is_served_with_its_type_and_headers(node, name):
    response = node.client().get(f"/panel/{name}")
    assert response.status == 200
    assert response.body == FILES[name].body
    assert response.headers["content-type"] == FILES[name].media_type
    assert response.headers["etag"] == FILES[name].etag
    assert_panel_headers(response)


def test_head_answers_the_headers_of_get_without_a_body(node):
    client = node.client()
    for path, name in (("/", "index.html"), ("/panel/js/app.js", "js/app.js")):
        response = client.request("HEAD", path)
        assert response.status == 200 and response.body == b""
        assert response.headers["content-length"] == str(len(FILES[name].body))
        assert response.headers["etag"] == FILES[name].etag
        assert_panel_headers(response)


def test_revalidation_answers_304_only_for_the_current_etag(node):
    client = node.client()
    etag = FILES["css/panel.css"].etag
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        response = client.get("/panel/css/panel.css", headers={"If-None-Match": header})
        assert response.status == 304 and response.body == b"", header
        assert response.headers["etag"] == etag
        assert_panel_headers(response)
    changed = client.get("/panel/css/panel.css", headers={"If-None-Match": '"something-else"'})
    assert changed.status == 200 and changed.body == FILES["css/panel.css"].body


@pytest.mark.parametrize("path", [
    "/panel/README.md", "/panel/vendor/VENDORED.md", "/panel/../setup.cfg", "/panel/%2e%2e/daemon.py",
    "/panel/..%2f..%2fsetup.cfg", "/panel/js/../../daemon.py", "/panel//etc/passwd", "/panel/",
    "/panel/js/nope.js", "/panel/%ff", "/index.html",
])
def test_nothing_outside_the_loaded_set_is_served(node, path):
    response = node.client().get(path)
    assert response.status == 404 and response.error_code == "not_found", (path, response.body[:200])
    assert_panel_headers(response)


def test_host_and_method_rules_apply(node):
    refused = node.client(host="evil.example").get("/")
    assert refused.status == 403 and refused.error_code == "host_not_allowed"
    assert node.client(host="localhost:1234").get("/panel/js/app.js").status == 200
    posted = node.client().post("/panel/js/app.js", {})
    assert posted.status == 405 and posted.headers["allow"] == "GET, HEAD"
    assert node.client().request("DELETE", "/").headers["allow"] == "GET, HEAD"


def test_a_rest_row_takes_one_or_more_segments_and_yields_to_other_rows():
    def handler(req):
        return None

    table = RouteTable([Route("GET", "/panel/{path...}", "public", handler),
                        Route("GET", "/panel/fixed", "public", handler),
                        Route("GET", "/api/x/{id}", "public", handler)])
    route, params = table.match("GET", "/panel/js/pages/a.js")
    assert route.pattern == "/panel/{path...}" and params == {"path": "js/pages/a.js"}
    assert table.match("GET", "/panel/fixed")[0].pattern == "/panel/fixed"
    assert table.match("GET", "/panel/a%20b")[1] == {"path": "a b"}
    for path in ("/panel", "/panel/", "/panelx/a", "/api/x"):
        with pytest.raises(ApiError) as error:
            table.match("GET", path)
        assert error.value.status == 404, path
    with pytest.raises(ApiError) as error:
        table.match("PUT", "/panel/a")
    assert error.value.status == 405 and error.value.headers == {"Allow": "GET"}
    with pytest.raises(ValueError):
        RouteTable([Route("GET", "/x/{id}/{rest...}", "public", handler)])
