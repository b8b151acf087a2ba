"""A TOML writer for the subset `contentnode config export` prints (read back with tomllib).

Tables hold strings, whole numbers, booleans, lists of those, tables and lists
of tables. A table inside a list of tables is written inline, so the reader
gives it back to the same element. TOML has no null: a None is refused.
"""

import json
import re

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def key(name: str) -> str:
    return name if _BARE.fullmatch(name) else _string(name)


def _string(text: str) -> str:
    # JSON's escapes (\" \\ \n \t, \u with four hex digits ...) are TOML basic-string escapes too; "\/" it never writes
    return json.dumps(text, ensure_ascii=False)


def value(item) -> str:
    """One value as TOML writes it inline."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, str):
        return _string(item)
    if isinstance(item, list):
        return "[" + ", ".join(value(v) for v in item) + "]"
    if isinstance(item, dict):
        return "{" + ", ".join(f"{key(k)} = {value(v)}" for k, v in item.items()) + "}" if item else "{}"
    raise ValueError(f"TOML cannot hold {type(item).__name__} values")


def _is_tables(item) -> bool:
    return isinstance(item, list) and bool(item) and all(isinstance(v, dict) for v in item)


def _table(path: list, table: dict, out: list) -> None:
    """The plain members of `table`, then its tables ([path.key]) and lists of tables ([[path.key]])."""
    for name, item in table.items():
        if not isinstance(item, dict) and not _is_tables(item):
            out.append(f"{key(name)} = {value(item)}")
    for name, item in table.items():
        where = [*path, key(name)]
        if isinstance(item, dict):
            out.extend(["", f"[{'.'.join(where)}]"])
            _table(where, item, out)
        elif _is_tables(item):
            for element in item:
                out.extend(["", f"[[{'.'.join(where)}]]"])
                out.extend(f"{key(k)} = {value(v)}" for k, v in element.items())


def dumps(document: dict) -> str:
    """The TOML text of `document` (a table)."""
    out: list = []
    _table([], document, out)
    return "\n".join(out).lstrip("\n") + "\n"
