"""Every error code the node can answer is listed in docs/API.md's error conventions.

The codes are read from the source: the code argument of ApiError (and of the
services' NotServed and CertificateError, which the handlers map to it), conflict and
forbidden, the fixed codes of invalid/not_found/rate_limited, `{"error":
{"code": ...}}` literals (as dicts or prewritten bytes), and, where a code is passed as a variable, the
(code, message) tables and {status: code} maps of that module.
"""

import ast
import functools
import os
import re

from tests.node import ROOT

PACKAGE = os.path.join(ROOT, "contentnode")
API_MD = os.path.join(ROOT, "docs", "API.md")
FIXED = {"invalid": "invalid", "not_found": "not_found", "rate_limited": "rate_limited"}
CODE_FIRST = {"conflict", "forbidden"}
CODE_SECOND = {"ApiError", "NotServed", "CertificateError"}   # (status, code, message): the services' errors too


def _name(call) -> str:
    return getattr(call.func, "id", None) or getattr(call.func, "attr", "")


def _const(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _tables(tree) -> set:
    """Codes in a module's (code, message) tuples and {status: code} dicts."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and len(node.elts) == 2 and all(_const(e) for e in node.elts):
            found.add(_const(node.elts[0]))
        if isinstance(node, ast.Dict) and node.keys and all(
                isinstance(k, ast.Constant) and isinstance(k.value, int) for k in node.keys):
            found.update(filter(None, map(_const, node.values)))
    return {code for code in found if re.fullmatch(r"[a-z]+(_[a-z]+)*", code)}


@functools.cache
def codes_in_source() -> dict:
    """code -> the first file that answers it (read-only; parsed once for both tests: ~1 s of CPU each)."""
    codes = {}
    for dirpath, _, filenames in os.walk(PACKAGE):
        for filename in filenames:
            if not filename.endswith(".py"):
                continue
            path = os.path.join(dirpath, filename)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            where = os.path.relpath(path, ROOT)
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    name = _name(node)
                    arg = None
                    if name in CODE_SECOND and len(node.args) >= 2:
                        arg = node.args[1]
                    elif name in CODE_FIRST and node.args:
                        arg = node.args[0]
                    if name in FIXED:
                        codes.setdefault(FIXED[name], where)
                    if arg is not None:
                        if _const(arg):
                            codes.setdefault(_const(arg), where)
                        elif isinstance(arg, (ast.Name, ast.Call)):
                            for code in _tables(tree):
                                codes.setdefault(code, where)
                if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                    for code in re.findall(rb'"code":\s*"([a-z_]+)"', node.value):
                        codes.setdefault(code.decode(), where)
                if isinstance(node, ast.Dict):
                    for key, value in zip(node.keys, node.values):
                        if _const(key) == "error" and isinstance(value, ast.Dict):
                            for k, v in zip(value.keys, value.values):
                                if _const(k) == "code" and _const(v):
                                    codes.setdefault(_const(v), where)
    return codes


def documented_codes() -> set:
    """The codes in backquotes in the **Errors.** convention of docs/API.md."""
    with open(API_MD, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"- \*\*Errors\.\*\*(.*?)\n- \*\*", text, re.S)
    assert section, "docs/API.md lost its **Errors.** convention"
    return set(re.findall(r"`([a-z_]+)`", section.group(1)))


def test_the_scan_finds_codes_of_every_kind():
    codes = codes_in_source()
    for code in ("invalid", "last_admin", "port_in_use", "signature_required", "link_expired",
                 "domain_check_failed", "uri_too_long", "internal", "overloaded"):
        assert code in codes, code


def test_every_error_code_is_documented():
    documented = documented_codes()
    missing = {code: where for code, where in codes_in_source().items() if code not in documented}
    assert missing == {}, "error codes not listed in docs/API.md (**Errors.**): " + ", ".join(
        f"{code} ({where})" for code, where in sorted(missing.items()))
