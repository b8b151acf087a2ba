"""The services build_app makes take named collaborators, never the App (issue 29).

Two checks. In a running App, no object build_app made keeps the App in an
attribute, a method bound to it, or a function closing over it; the one
exception is the admin dispatcher, which hands the App to the admin handlers
on purpose (their req.app). And in build_app's source no lambda closes over
`app`: a collaborator that must see a later value is handed the object that
holds it, not the App.
"""

import ast
import functools
import inspect
import textwrap

import pytest

from contentnode import app as app_module
from contentnode.http.request import Request
from tests.wiring import holding, holds

pytestmark = pytest.mark.in_process


def test_no_service_keeps_the_app(node):
    app = node.app
    services = {name: value for name, value in vars(app).items() if not name.startswith("_")}
    kept = {name: holding(value, app) for name, value in services.items() if holding(value, app)}
    assert kept == {"admin_dispatcher": ["handler_context"]}
    for job in app.jobs:
        assert holding(job, app) == [], f"the background job {job!r} keeps the App"
    for name, server in app.listeners.servers.items():
        assert holding(server, app) == [], f"the {name} listener keeps the App"
        assert holding(server.dispatch, app) == [], f"the {name} listener's entry keeps the App"
    for name, obj in [("the TLS runtime's pipeline", app.tls.public_dispatcher),
                      ("the content engine's origins", app.delivery.origins)]:
        assert holding(obj, app) == [], f"{name} keeps the App"


def test_the_check_finds_an_app_kept(node):
    """The checks above could fail: a closure, a bound method and a partial over the App are found."""
    app = node.app
    assert holds(lambda: app.store, app)
    assert holds(app.start, app)
    assert holds(functools.partial(print, app), app)
    assert not holds(lambda: node, app)


def _closures_over_app(function) -> list:
    """The lambdas and nested functions in `function`'s source that name `app`."""
    tree = ast.parse(inspect.getsource(function)).body[0]
    nested = [node for node in ast.walk(tree) if isinstance(node, (ast.Lambda, ast.FunctionDef)) and node is not tree]
    return [ast.unparse(node) for node in nested
            if any(isinstance(name, ast.Name) and name.id == "app" for name in ast.walk(node))]


def test_build_app_has_no_closure_over_app():
    assert _closures_over_app(app_module.build_app) == []


def _wired_badly(app):
    app.policy = Policy(lambda: app.settings)   # noqa: F821 (never run: its source is read)
    app.other = Policy(lambda: store.data)   # noqa: F821


def test_the_source_check_finds_a_closure_over_app():
    assert _closures_over_app(_wired_badly) == ["lambda: app.settings"]


def test_a_request_is_audited_without_the_app():
    """Request.audit writes to the audit log the admin dispatcher handed it, not to req.app's."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(Request.audit)))
    assert [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "app"] == []
    assert "audit_log" in {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
