"""The request body schemas declared on the Route rows (docs/API.md, "Declared body shapes"): every body-taking
row declares one, each uses only what http/schema.check knows, and check() refuses
exactly what a standard JSON Schema validator calls invalid, so the published
document and the dispatcher cannot disagree."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from contentnode import api
from contentnode.core.fields import FieldError
from contentnode.http import schema

BODY_METHODS = {"POST", "PUT", "PATCH"}
DECLARED = [route for route in api.ROUTES if route.body is not None]


def _keywords(node, where):
    """Every keyword of a schema and its sub-schemas, with the place it sits."""
    for key, value in node.items():
        yield key, where
        if key == "properties":
            for name, member in value.items():
                yield from _keywords(member, f"{where}.{name}")
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            yield from _keywords(value, f"{where}[]")
        elif key == "not":
            assert value == {}, f"{where}: only {{'not': {{}}}} (a member never taken) is understood"


def test_every_row_that_takes_a_body_declares_its_schema():
    missing = [f"{r.method} {r.pattern}" for r in api.ROUTES if r.method in BODY_METHODS and r.body is None]
    assert missing == []


@pytest.mark.parametrize("route", DECLARED, ids=lambda r: f"{r.method} {r.pattern}")
def test_declared_schemas_use_only_what_the_checker_knows(route):
    Draft202012Validator.check_schema(route.body)
    unknown = [(key, where) for key, where in _keywords(route.body, "body") if key not in schema.KEYWORDS]
    assert unknown == []


def _names(node) -> list:
    """Member names the schema mentions, so generated objects often hit declared members."""
    names = []
    for name, member in node.get("properties", {}).items():
        names += [name, *_names(member)]
    return names


def _json(names):
    scalars = (st.none() | st.booleans() | st.integers(-2, 70000) | st.sampled_from([0.5, 1.0, 301.0])
               | st.text(max_size=12) | st.sampled_from(["/", "http://a.example/x", "x" * 70, "domains:read",
                                                          "us-east-1", "Media-1", "stable", "all", "12345678"]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.sampled_from(names) | st.text(max_size=3), inner, max_size=5),
                        max_leaves=12)


@pytest.mark.parametrize("route", DECLARED, ids=lambda r: f"{r.method} {r.pattern}")
def test_check_refuses_exactly_what_json_schema_calls_invalid(route):
    validator = Draft202012Validator(route.body)
    names = _names(route.body) or ["x"]

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(names), _json(names), max_size=len(names)) | _json(names))
    def agree(value):
        try:
            schema.check(route.body, value)
            refused = False
        except FieldError:
            refused = True
        if not validator.is_valid(value):
            assert refused, value  # the document calls it invalid: the dispatcher refuses it
        elif refused:
            assert _integral_float(value), value  # the one stricter rule: 301.0 is not the integer 301

    agree()


def _integral_float(value) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_integral_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_integral_float(item) for item in value)
    return False


def test_check_names_the_member_at_fault():
    body = api.ROUTES[[f"{r.method} {r.pattern}" for r in api.ROUTES].index("PUT /api/notifications")].body
    for value, field in [({"email": {"port": "x"}}, "email.port"), ({"email": {"bogus": 1}}, "email.bogus"),
                         ({"events": {"nope": True}}, "events.nope"), ({"telegram": []}, "telegram"),
                         ({"nothing": 1}, "nothing")]:
        with pytest.raises(FieldError) as caught:
            schema.check(body, value)
        assert caught.value.field == field, (value, caught.value.message)
    with pytest.raises(FieldError) as caught:
        schema.check(body, [])
    assert caught.value.field is None and caught.value.message == "the body must be a JSON object"
