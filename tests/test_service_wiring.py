"""The services build_app makes take named collaborators, never the App (issue 29).

Two checks. In a running App, no object build_app made keeps the App in an
attribute, a method bound to it, or a function closing over it: not a
service, a job, a listener, nor what admin handlers and public stages reach
as req.app (the AdminContext and PublicContext) or any field of those. And
in build_app's source no lambda closes over `app`: a collaborator that must
see a later value is handed the object that holds it, not the App.
"""

import ast
import dataclasses
import functools
import inspect
import textwrap

import pytest

from contentnode import app as app_module
from contentnode.api.context import AdminContext
from contentnode.http.request import Request
from tests.wiring import holding, holds

pytestmark = pytest.mark.in_process


def _contexts(app) -> dict:
    """What admin handlers and public stages reach as req.app, by name."""
    return {"the admin context": app.admin_dispatcher.handler_context,
            "the public context": app.public_dispatcher.context}


def _reachable(app) -> dict:
    """Every object of the walk, by name: the App's services, jobs, listeners and contexts, each context's fields."""
    objects = {f"app.{name}": value for name, value in vars(app).items() if not name.startswith("_")}
    objects.update({f"the background job {job!r}": job for job in app.jobs})
    for name, server in app.listeners.servers.items():
        objects.update({f"the {name} listener": server, f"the {name} listener's entry": server.dispatch})
    objects.update({"the TLS runtime's pipeline": app.tls.public_dispatcher,
                    "the content engine's origins": app.delivery.origins})
    for name, context in _contexts(app).items():
        objects[name] = context
        fields = getattr(type(context), "__slots__", ())   # none when the check is shown the App itself
        objects.update({f"{name}'s {field}": getattr(context, field) for field in fields})
    return objects


def test_no_service_keeps_the_app(node):
    app = node.app
    reachable = _reachable(app)
    assert len(reachable) > len(vars(app)) + len(AdminContext.__slots__)
    kept = {name: holding(obj, app) for name, obj in reachable.items() if holding(obj, app)}
    assert kept == {}


def test_admin_handlers_get_the_apps_own_collaborators(node):
    """The admin context holds the very objects the App holds (none is replaced while the node runs),
    and the two it adds read the current value: the bound port, not the configured 0."""
    app = node.app
    context = app.admin_dispatcher.handler_context
    assert isinstance(context, AdminContext) and context is not app
    fields = set(AdminContext.__slots__)
    assert fields - set(vars(app)) == {"apply_policy", "bound_port"}
    assert {field for field in fields & set(vars(app)) if getattr(context, field) is not getattr(app, field)} == set()
    assert app.config.admin_port == 0 and context.bound_port("admin") == node.admin_port


def test_the_check_finds_an_app_kept(node):
    """The checks above could fail: a closure, a bound method and a partial over the App are found,
    and so is a context field or a context handed the App."""
    app = node.app
    assert holds(lambda: app.store, app)
    assert holds(app.start, app)
    assert holds(functools.partial(print, app), app)
    assert not holds(lambda: node, app)
    context = app.admin_dispatcher.handler_context
    assert holding(context, app) == []
    assert holding(dataclasses.replace(context, apply_policy=app.stop, bound_port=lambda name: app), app) == [
        "apply_policy", "bound_port"]
    app.admin_dispatcher.handler_context = app
    try:
        assert {name: holding(obj, app) for name, obj in _reachable(app).items() if holding(obj, app)} == {
            "app.admin_dispatcher": ["handler_context"], "the admin context": ["(itself)"],
            "the public context's admin_dispatcher": ["handler_context"]}
    finally:
        app.admin_dispatcher.handler_context = context


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
