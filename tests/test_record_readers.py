"""No reader of a declared record field writes its default (issue 29): the load fills it in.

The record tables (core/migrations.py RECORDS and OBJECTS: rules, domains,
buckets, the fleet section) declare each field's default once, and the store's
load, a create and a restore fill it in, so code reading a stored record
indexes the field. A `.get("<field>", <its default>)` anywhere in the package
is a second declaration that can drift from the table; this finds each one by
the field's name and the value the call supplies (a literal, or a name of the
calling module, evaluated there).
"""

import ast
import importlib
import pathlib

from contentnode.core.migrations import OBJECTS, RECORDS

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "contentnode"


def _defaults() -> dict:
    """{field name: [default, ...]} of every member the tables fill in."""
    out: dict = {}
    for table in (*RECORDS.values(), *OBJECTS.values()):
        for name, field in table.every().items():
            if field.filled:
                out.setdefault(name, []).append(field.default)
    return out


def _same(a, b) -> bool:
    """Equal as a default: a bool only to a bool, a number to a number (5 and 5.0), else by type."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b
    return type(a) is type(b) and a == b


def _supplied(node: ast.expr, module_name: str):
    """The value a .get's second argument stands for, or a marker when it cannot be known here."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, (ast.Name, ast.Attribute)):
        module = importlib.import_module(module_name)
        try:
            return eval(compile(ast.Expression(node), module_name, "eval"), vars(module))  # a name, read only
        except (NameError, AttributeError):
            return _UNKNOWN
    return _UNKNOWN


_UNKNOWN = object()


def _writers(defaults: dict) -> list:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module_name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in defaults):
                continue
            value = _supplied(node.args[1], module_name)
            if value is not _UNKNOWN and any(_same(value, d) for d in defaults[node.args[0].value]):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_scan_finds_a_reader_writing_a_default():
    """The check itself: a call as the issue quotes it is found."""
    defaults = _defaults()
    assert defaults["compress"] == [True] and defaults["role"] == ["standalone"]
    call = ast.parse('rule.get("compress", True)', mode="eval").body
    assert _same(_supplied(call.args[1], "contentnode.core.rules"), True)


def test_no_reader_of_a_declared_field_writes_its_default():
    assert _writers(_defaults()) == []
