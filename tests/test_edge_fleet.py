"""The fleet carries the browser and domain edge members: a real replica following a primary
serves the primary's cors and error pages and refuses by the primary's domain access list, and
refuses PUT /api/domains/{host} itself (the domain record is the fleet's)."""

from tests.fleet_setup import serving_fleet_fixture, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)

fleet = serving_fleet_fixture(replicas=1)
PAGE = b"<!doctype html><title>Not here</title>"


def test_a_replica_follows_the_primarys_cors_error_pages_and_domain_access(fleet):
    host, replica, admin = fleet.site.host, fleet.replicas[0], fleet.admin
    rule = admin.get("/api/rules").json["rules"][0]
    fleet.site.put("pages/404.html", PAGE, "text/html")
    before = fleet.seq()
    assert admin.put(f"/api/rules/{rule['id']}", {"cors": {"origins": ["https://app.example"]}}).status == 200
    assert admin.put(f"/api/domains/{host}", {"error_pages": {"404": "pages/404.html"}}).status == 200
    fleet.wait_synced(after=before)
    public = replica.client("public", host=host)
    answer = public.get("/hello.txt", headers={"Origin": "https://app.example"})
    assert answer.status == 200 and answer.headers["access-control-allow-origin"] == "https://app.example"
    missing = public.get("/missing.txt")
    assert (missing.status, missing.body, missing.headers["content-type"]) == (404, PAGE, "text/html")

    refused = fleet.replica_admins[0].put(f"/api/domains/{host}", {"access": {"deny": ["127.0.0.0/8"]}})
    assert refused.status == 409 and refused.json["error"]["code"] == "managed_by_fleet"
    assert public.get("/hello.txt").status == 200
    before = fleet.seq()
    assert admin.put(f"/api/domains/{host}", {"access": {"deny": ["127.0.0.0/8", "::1/128"]}}).status == 200
    fleet.wait_synced(after=before)
    assert wait_for(lambda: public.get("/hello.txt").status == 403, what="the replica refusing by the domain's list")
    assert fleet.state(replica)["domains"][host]["access"] == {"allow": [], "deny": ["127.0.0.0/8", "::1/128"]}
