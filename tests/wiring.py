"""Does an object build_app made keep the App? (tests/test_service_wiring.py, test_public_wiring.py)"""

import functools


def holds(value, app) -> bool:
    """Is `value` the App, a method bound to it, a function closing over it, or a partial of either?"""
    if value is app or getattr(value, "__self__", None) is app:
        return True
    if isinstance(value, functools.partial):
        return any(holds(part, app) for part in (value.func, *value.args, *value.keywords.values()))
    return any(cell.cell_contents is app for cell in getattr(value, "__closure__", None) or ())


def holding(obj, app) -> list:
    """The attributes of `obj` (instance dict and slots) that hold the App; ["(itself)"] when obj does."""
    if holds(obj, app):
        return ["(itself)"]
    names = list(vars(obj)) if hasattr(obj, "__dict__") else []
    names += [name for cls in type(obj).__mro__ for name in getattr(cls, "__slots__", ())]
    return sorted(name for name in set(names) if hasattr(obj, name) and holds(getattr(obj, name), app))
