"""Country lists in a rule's `access` against the node (a daemon; built in the test process where a
test only speaks HTTP) with a real country MMDB file (tests/geo_db.py: 127.0.0.2 is DE, 127.0.0.3
FR, 127.0.0.4 US, 127.0.0.1 nowhere), clients sending from those loopback addresses, and an origin
that counts its requests."""

import http.client
import os
import subprocess
import sys
import threading

import pytest

from tests.geo_db import write_country_db
from tests.inprocess import InProcessNode
from tests.node import ADMIN_PASSWORD, ADMIN_USER, ROOT, Node
from tests.test_access_log import access_lines, fields
from tests.test_edge_controls import origin, refusals  # noqa: F401 (the origin fixture)
from tests.test_origin_cache import HOST
from tests.test_origin_cache import shared_site as site
from tests.two_workers import TwoWorkerNode, both_serving, syscalls, wait_until, worker_syscalls

pytestmark = pytest.mark.daemon_process


def fetch_from(source, port, path):
    """GET path on the public port from the loopback address `source`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Host": HOST})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def started(tmp_path, node_class=Node, env=None):
    node = node_class(str(tmp_path), env={"CONTENTNODE_GEOIP_DB": write_country_db(tmp_path / "countries.mmdb"),
                                          **(env or {})}).start()
    admin = node.client()
    assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    return node, admin


def test_country_lists_are_enforced_by_two_public_workers_before_the_origin(tmp_path, origin):  # noqa: F811
    node, admin = started(tmp_path, TwoWorkerNode)
    try:
        assert both_serving(node)
        listing = admin.get("/api/rules").json
        assert listing["country_database"] == {"available": True, "missing": None}
        rule = site(admin, origin, access={"countries": {"allow": ["de"]}})
        assert rule["access"] == {"allow": [], "deny": [], "countries": {"allow": ["DE"]}}
        answers: dict = {"127.0.0.2": [], "127.0.0.3": [], "127.0.0.1": []}
        # the kernel picks the worker that accepts each connection: a run one worker served (almost)
        # alone shows nothing about both, so the 45 requests are sent again (new paths) until it did
        for rounds in range(1, 4):
            before = worker_syscalls(node)
            threads = [threading.Thread(target=lambda s=source, n=n, r=rounds: answers[s].append(
                fetch_from(s, node.public_port, f"/f{s[-1]}-{r}-{n}"))) for source in answers for n in range(15)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            if all(syscalls(pid) >= before[pid] + 5 for pid in before):
                break
        else:
            pytest.fail("in three runs of 45 requests a worker served (almost) nothing")
        assert [status for status, _ in answers["127.0.0.2"]] == [200] * 15 * rounds          # DE: allowed
        assert {status for status, _ in answers["127.0.0.3"] + answers["127.0.0.1"]} == {403}
        assert all(b'"forbidden_address"' in body for _, body in answers["127.0.0.3"])
        # FR and the address the database does not know never reached the origin
        assert len(origin.seen) == 15 * rounds and all(s.path.startswith("/f2-") for s in origin.seen)
        # summed over the workers (reported every few seconds)
        assert wait_until(lambda: refusals(node, "forbidden_address") == 30 * rounds, 30)
        assert wait_until(lambda: len(access_lines(node.log())) >= 45 * rounds, 30)
        lines = [fields(line) for line in access_lines(node.log()) if "port=public" in line]
        assert {(f["client"], f["status"], f.get("refused")) for f in lines} == {
            ("127.0.0.2", "200", None), ("127.0.0.3", "403", "forbidden_address"),
            ("127.0.0.1", "403", "forbidden_address")}

        # a deny list: FR refused, DE and the unknown address let in
        changed = admin.put(f"/api/rules/{rule['id']}", {"access": {"countries": {"deny": ["FR", "fr", "US"]}}})
        assert changed.status == 200 and changed.json["access"]["countries"] == {"deny": ["FR", "US"]}
        assert fetch_from("127.0.0.3", node.public_port, "/f-deny")[0] == 403
        assert fetch_from("127.0.0.4", node.public_port, "/f-deny")[0] == 403
        assert fetch_from("127.0.0.2", node.public_port, "/f-deny")[0] == 200
        assert fetch_from("127.0.0.1", node.public_port, "/f-deny")[0] == 200
        assert origin.requests_for("/f-deny") != [] and len(origin.seen) == 15 * rounds + 1
        # CIDR lists and the country list all hold: DE but in a denied network is refused
        both = admin.put(f"/api/rules/{rule['id']}", {"access": {"deny": ["127.0.0.2/32"],
                                                                 "countries": {"allow": ["DE", "FR"]}}})
        assert both.status == 200
        assert fetch_from("127.0.0.2", node.public_port, "/f-both")[0] == 403
        assert fetch_from("127.0.0.3", node.public_port, "/f-both")[0] == 200
        assert wait_until(lambda: refusals(node, "forbidden_address") == 30 * rounds + 3, 30)
    finally:
        node.close()


def test_country_lists_are_checked_at_save_and_through_config_apply(tmp_path, origin):  # noqa: F811
    node, admin = started(tmp_path, InProcessNode)   # HTTP and the traffic insight only
    try:
        rule = site(admin, origin)
        where = f"/api/rules/{rule['id']}"
        for countries, field in (({"allow": ["DEU"]}, "access.countries.allow"),
                                 ({"deny": ["D1"]}, "access.countries.deny"),
                                 ({"allow": []}, "access.countries.allow"),
                                 ({"allow": ["DE"], "deny": ["FR"]}, "access.countries"),
                                 ({}, "access.countries"),
                                 ({"block": ["DE"]}, "access.countries.block")):
            bad = admin.put(where, {"access": {"countries": countries}})
            assert bad.status == 400 and bad.json["error"]["field"] == field, (countries, bad.body)
        assert admin.get(where).json["access"] is None                       # nothing changed
        config = admin.get("/api/config").json
        document = {"rules": [dict(r, access={"countries": {"deny": ["fr"]}}) for r in config["document"]["rules"]]}
        applied = admin.post("/api/config/apply", {"document": document},
                             headers={"If-Match": f'"{config["revision"]}"'})
        assert applied.status == 200, applied.body
        assert admin.get(where).json["access"] == {"allow": [], "deny": [], "countries": {"deny": ["FR"]}}
        assert fetch_from("127.0.0.3", node.public_port, "/f-applied")[0] == 403
        assert origin.requests_for("/f-applied") == []

        # a domain's access takes a country list too, checked before the rule's
        domain = admin.get(f"/api/domains/{HOST}")
        put = admin.put(f"/api/domains/{HOST}", {"access": {"countries": {"deny": ["de"]}}},
                        headers={"If-Match": domain.headers["etag"]})
        assert put.status == 200 and put.json["access"]["countries"] == {"deny": ["DE"]}, put.body
        assert fetch_from("127.0.0.2", node.public_port, "/f-domain")[0] == 403
        assert fetch_from("127.0.0.4", node.public_port, "/f-domain")[0] == 200
        assert [s.path for s in origin.seen if s.path == "/f-domain"] == ["/f-domain"]
        # traffic insight counts each request under its client's country
        def by_country():
            top = admin.get(f"/api/traffic/top?domain={HOST}&by=country").json["top"]
            return {row["value"]: row["requests"] for row in top}
        assert wait_until(lambda: by_country().get("US") == 1 and by_country().get("DE") == 1, 20), by_country()
        assert by_country().get("FR", 0) >= 1 and None not in by_country()
    finally:
        node.close()


def test_without_the_maxminddb_package_a_country_list_names_it(tmp_path, origin):  # noqa: F811
    """geoip_db is set, but maxminddb cannot be imported (a module that refuses to load stands in
    front of it): the node starts, and a country list is refused naming the missing package."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "maxminddb.py").write_text("raise ImportError('not installed here')\n")
    node, admin = started(tmp_path, env={"PYTHONPATH": f"{shadow}{os.pathsep}{ROOT}"})
    try:
        listing = admin.get("/api/rules").json["country_database"]
        assert listing["available"] is False and "maxminddb" in listing["missing"]
        assert "geoip_db start-up value" not in listing["missing"]
        rule = site(admin, origin)
        refused = admin.put(f"/api/rules/{rule['id']}", {"access": {"countries": {"deny": ["FR"]}}})
        assert refused.status == 400 and refused.json["error"]["field"] == "access.countries"
        assert "lacks the maxminddb package" in refused.json["error"]["message"]
    finally:
        node.close()


def test_a_geoip_db_that_is_no_country_database_stops_the_start(tmp_path):
    bad = tmp_path / "not.mmdb"
    bad.write_bytes(b"this is not a MaxMind DB file" * 10)
    env = dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_GEOIP_DB=str(bad))
    result = subprocess.run([sys.executable, "-m", "contentnode", "serve", "--data-dir", str(tmp_path / "data"),
                             "--admin-port", "0", "--public-port", "0", "--public-bind", "127.0.0.1"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"geoip_db {bad} cannot be read as a country MMDB file" in result.stderr
