"""The OpenAPI document (docs/API.md, "GET /api/openapi.json"): generated from the route table, valid, complete, and current."""

import json
from pathlib import Path

import pytest

from contentnode import api
from contentnode.http import openapi

DOCUMENT = Path(__file__).resolve().parent.parent / "docs" / "openapi.json"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def test_docs_openapi_json_is_what_the_code_generates():
    assert DOCUMENT.read_text() == api.openapi_json(), "docs/openapi.json is stale: run `make openapi`"


def test_the_document_is_valid_openapi_3_1():
    # imported here, not at collection: ~0.7 s of CPU, paid by every xdist worker (each collects every file)
    from openapi_spec_validator import validate

    document = json.loads(api.openapi_json())
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_every_route_appears_with_its_scope_and_nothing_else():
    document = json.loads(api.openapi_json())
    operations = {(method.upper(), path): op for path, item in document["paths"].items()
                  for method, op in item.items() if method in METHODS}
    rows = {(route.method, openapi.path_template(route.pattern)): route for route in api.ROUTES}
    assert set(operations) == set(rows)
    for key, route in rows.items():
        operation = operations[key]
        assert operation["x-scope"] == route.access, key
        assert str(route.status) in operation["responses"], key
        declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert declared == set(route.query), key
        if route.body is not None:
            assert operation["requestBody"]["content"]["application/json"]["schema"] == route.body
            assert operation["requestBody"]["required"] is not route.body_optional, key
        if route.answer is not None:
            assert operation["responses"][str(route.status)]["content"]["application/json"]["schema"] == route.answer
    assert len({op["operationId"] for op in operations.values()}) == len(operations)


@pytest.mark.in_process   # HTTP to the App
def test_the_node_serves_the_same_document_to_a_logged_in_client(admin, node):
    assert node.client().get("/api/openapi.json").status == 401
    answer = admin.get("/api/openapi.json")
    assert answer.status == 200 and answer.json == json.loads(api.openapi_json())
