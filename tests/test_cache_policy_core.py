"""A rule's cache members: their record rules, bucket-type defaults and the query they keep."""

import pytest

from contentnode.core import cache_policy as cp
from contentnode.core.fields import FieldError
from contentnode.core.http_cache import StaleDefaults


def test_query_policy_values():
    assert cp.query_policy("ignore") == "ignore"
    assert cp.query_policy("include") == "include"
    assert cp.query_policy({"only": ["v", "a", "v"]}) == {"only": ["a", "v"]}


@pytest.mark.parametrize("bad", ["all", "", None, 1, [], {}, {"only": []}, {"only": "a"}, {"only": ["a"], "x": 1},
                                 {"only": [""]}, {"only": ["a=b"]}, {"only": ["a b"]}, {"only": [3]},
                                 {"only": [f"n{i}" for i in range(cp.MAX_QUERY_NAMES + 1)]}])
def test_query_policy_refusals_name_the_field(bad):
    with pytest.raises(FieldError) as caught:
        cp.query_policy(bad)
    assert caught.value.field == "query"


def test_defaults_keep_old_rules_meaning_and_http_rules_are_a_shared_cache():
    assert cp.defaults_for("s3") == cp.defaults_for("folder") == {
        "cache_mode": "override", "query": "ignore", "methods": "read", "max_body": 10 << 20,
        "stale_while_revalidate": 0, "stale_if_error": 0}
    assert cp.defaults_for("http") == {
        "cache_mode": "origin", "query": "include", "methods": "all", "max_body": 10 << 20,
        "stale_while_revalidate": 0, "stale_if_error": 0}


def test_kept_query_follows_the_policy_in_the_clients_order():
    pairs = [("b", "2"), ("a", "1"), ("sig", "x"), ("a", "3")]
    assert cp.kept_query("ignore", pairs) == []
    assert cp.kept_query("include", pairs) == pairs
    assert cp.kept_query("include", pairs, dropped=["sig"]) == [("b", "2"), ("a", "1"), ("a", "3")]
    assert cp.kept_query({"only": ["a"]}, pairs) == [("a", "1"), ("a", "3")]


def test_stale_defaults_read_the_rule():
    assert cp.stale_defaults({"stale_while_revalidate": 5, "stale_if_error": 7}) == StaleDefaults(5, 7)
