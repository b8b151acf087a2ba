"""core/rules: path normalisation, key mapping and longest-prefix matching."""

import pytest
from hypothesis import given, settings, strategies as st

from contentnode.core.fields import FieldError
from contentnode.core.rules import (RuleIndex, has_dot_segment, key_for, normalise_path,
                                    validate_prefix)


@pytest.mark.parametrize("raw,canonical", [
    ("/", "/"), ("//", "/"), ("/static", "/static"), ("/static/", "/static"),
    ("/a//b///c/", "/a/b/c"), ("/caf\u00e9/men\u00fc", "/caf\u00e9/men\u00fc"), ("/a.b/c-d_e~", "/a.b/c-d_e~")])
def test_paths_normalise(raw, canonical):
    assert normalise_path(raw) == canonical


@pytest.mark.parametrize("raw,why", [
    ("static", "start with"), ("", "start with"), ("/a/../b", '".."'), ("/a/./b", '"."'), ("/..", '".."'),
    ("/a b", "contain"), ("/a?b", "contain"), ("/a#b", "contain"), ("/a%2Fb", "contain"),
    ("/a\\b", "contain"), ("/a\nb", "contain"), ("/" + "a" * 1024, "longer"), (None, "string")])
def test_bad_paths_are_refused_with_a_reason(raw, why):
    with pytest.raises(FieldError) as info:
        normalise_path(raw)
    assert why in str(info.value)


def test_prefix_validation():
    assert validate_prefix("") == ""
    assert validate_prefix("site/v2/") == "site/v2/"
    for bad in ("/site", "a\x00b", "a/../b/", "../x/", 5):
        with pytest.raises(FieldError):
            validate_prefix(bad)


def test_key_mapping_follows_the_rule_path():
    assert key_for("/static", "site/", "/static/a/b.png") == "site/a/b.png"
    assert key_for("/static", "", "/static/a.png") == "a.png"
    assert key_for("/", "root/", "/x/y.txt") == "root/x/y.txt"
    assert key_for("/static", "site/", "/static") == "site/"


def rule(rid, domain, path, prefix=""):
    return {"id": rid, "domain": domain, "path": path, "prefix": prefix, "enabled": True}


def test_longest_prefix_wins_on_segment_boundaries():
    index = RuleIndex([rule("root", "a.test", "/", "r/"), rule("img", "a.test", "/img", "i/"),
                       rule("deep", "a.test", "/img/large", "L/"), rule("other", "b.test", "/img")])
    assert index.match("a.test", "/img/large/x.jpg").rule["id"] == "deep"
    assert index.match("a.test", "/img/large/x.jpg").key == "L/x.jpg"
    assert index.match("a.test", "/img/small/x.jpg").key == "i/small/x.jpg"
    assert index.match("a.test", "/imgfoo/x.jpg").rule["id"] == "root"
    assert index.match("a.test", "/imgfoo/x.jpg").key == "r/imgfoo/x.jpg"
    assert index.match("a.test", "/img").rule["id"] == "img"
    assert index.match("a.test", "/img/").rule["id"] == "img"
    assert index.match("b.test", "/img/a").rule["id"] == "other"
    assert index.match("b.test", "/other") is None
    assert index.match("c.test", "/img/a") is None
    assert index.size == 4


def test_paths_with_dot_segments_or_no_slash_never_match():
    index = RuleIndex([rule("root", "a.test", "/")])
    for path in ("/a/../b", "/..", "/./x", "/a/.", "relative", ""):
        assert index.match("a.test", path) is None
    assert has_dot_segment("/a/..") and not has_dot_segment("/a/..b/.c")
    assert index.match("a.test", "/a/..b/.c").key == "a/..b/.c"


# --- property: the index agrees with a brute-force scan of every rule

SEGMENTS = st.sampled_from(["a", "b", "ab", "x.y"])
HOSTS = st.sampled_from(["one.test", "two.test"])
RULE_PATHS = st.lists(SEGMENTS, max_size=4).map(lambda segs: "/" + "/".join(segs))
REQUEST_PATHS = st.tuples(st.lists(SEGMENTS, max_size=6), st.booleans()).map(
    lambda t: "/" + "/".join(t[0]) + ("/" if t[1] and t[0] else ""))


def brute_force(rules, host, path):
    best = None
    for r in rules:
        if r["domain"] != host:
            continue
        p = r["path"]
        covers = p == "/" or path == p or path.startswith(p + "/")
        if covers and (best is None or len(p) > len(best["path"])):
            best = r
    return best


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(HOSTS, RULE_PATHS), max_size=25), HOSTS, REQUEST_PATHS)
def test_index_matches_brute_force(specs, host, path):
    rules, seen = [], set()
    for n, (h, p) in enumerate(specs):
        if (h, p) not in seen:  # paths are unique per domain
            seen.add((h, p))
            rules.append(rule(f"r{n}", h, normalise_path(p), f"k{n}/"))
    expected = brute_force(rules, host, path)
    got = RuleIndex(rules).match(host, path)
    if expected is None:
        assert got is None
    else:
        assert got is not None and got.rule["id"] == expected["id"]
        rest = path[len(expected["path"]):].lstrip("/") if expected["path"] != "/" else path[1:]
        assert got.key == expected["prefix"] + rest
