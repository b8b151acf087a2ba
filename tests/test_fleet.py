"""A fleet of real daemons: one primary, two replicas, SeaweedFS as the bucket, poll 1 s."""

import pytest

from tests.fleet_setup import Fleet, wait_for
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, seaweed):  # noqa: F811
    instance = Fleet(tmp_path_factory, seaweed)
    instance.site.add_rule("/", prefix="site/")
    instance.site.put("site/hello.txt", b"hello from the bucket", "text/plain")
    instance.wait_synced()
    yield instance
    instance.close()


def test_a_change_on_the_primary_is_served_by_both_replicas(fleet):
    for node in fleet.replicas:
        assert fleet.served(node, "/hello.txt").body == b"hello from the bucket"
    fleet.site.add_rule("/new", prefix="other/")
    fleet.site.put("other/x.txt", b"a new rule", "text/plain")
    fleet.wait_synced()
    for node in fleet.replicas:
        response = wait_for(lambda n=node: (r := fleet.served(n, "/new/x.txt")).status == 200 and r,
                            what="the new rule served")
        assert response.body == b"a new rule"
