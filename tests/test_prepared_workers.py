"""Prepared answers (public/prepared.py) in a public worker process: a worker follows the daemon's
state document before it gives an answer again, so a rule changed through the admin API is in the
very next answer, and the answers it gives again reach the daemon's
contentnode_public_prepared_answers_total with its other counts."""

import time

import pytest

from tests.test_prepared_hits import Site, field, traffic_counts
from tests.two_workers import both_serving, wait_until

pytestmark = pytest.mark.daemon_process


def test_a_worker_gives_answers_again_and_follows_a_rule_change(tmp_path):
    site = Site(str(tmp_path), env={"CONTENTNODE_PUBLIC_WORKERS": "2"})
    try:
        assert both_serving(site.node)
        site.sock.close()
        site.sock = site.connect()   # accepted by a worker that serves
        counted = traffic_counts(site.admin)["requests"]
        site.warm("/hdr/page.html")   # three requests
        before = site.again()
        for _ in range(20):
            assert field(site.ask("/hdr/page.html"), "X-Version") == "1"
        assert wait_until(lambda: site.again() - before >= 10, 15)
        assert wait_until(lambda: traffic_counts(site.admin)["requests"] - counted == 23, 5), \
            traffic_counts(site.admin)["requests"] - counted
        time.sleep(0.6)   # a worker reports every 0.25 s: nothing counted twice in a later report
        assert traffic_counts(site.admin)["requests"] - counted == 23
        date = field(site.ask("/hdr/page.html"), "Date")
        while field(site.ask("/hdr/page.html"), "Date") == date:
            pass   # a second just began: the change below lands within the second of the answer kept
        assert site.admin.put(f"/api/rules/{site.rules['/hdr/']}", {"headers": {"X-Version": "2"}}).status == 200
        assert field(site.ask("/hdr/page.html"), "X-Version") == "2"
    finally:
        site.sock.close()
        site.node.close()
