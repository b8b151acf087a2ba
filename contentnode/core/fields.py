"""The record rules' one vocabulary: reading fields out of JSON objects.

Handlers, backup restore and the CLI check records with these readers and the
rules built on them, so a mistake reads the same wherever it is made. A broken
rule raises FieldError; the admin dispatcher answers it as 400 `invalid` naming
the field, other callers turn it into their own message. The router has
already refused bodies holding text that is not valid Unicode (lone
surrogates), so every string here can be stored and answered.
"""

import re

from contentnode.core.hostnames import HostnameError, normalize_host
from contentnode.core.text import one_line

_MISSING = object()
# Stored times (epoch seconds): 2000-01-01T00:00:00Z to 9999-12-31T23:59:59Z, a range
# every time formatter can print (rfc3339 of 1e300 raises).
TIME_MIN, TIME_MAX = 946684800, 253402300799


class FieldError(ValueError):
    """A record breaks a rule: the message a user reads and the field at fault (None: the whole record)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.message = message
        if field is not None and not field.isascii():
            try:
                field.encode("utf-8")
            except UnicodeEncodeError:  # an unknown key the client sent: shown escaped
                field = ascii(field)[1:-1]
        self.field = field



def require_object(body) -> dict:
    if not isinstance(body, dict):
        raise FieldError("the body must be a JSON object")
    return body


def only(obj: dict, allowed) -> None:
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise FieldError(f"unknown field {unknown[0]!r}", unknown[0][:100])


def _get(obj, name, required, default):
    value = obj.get(name, _MISSING)
    if value is _MISSING or (value is None and not required and default is None):
        if required:
            raise FieldError(f"{name} is required", name)
        return _MISSING
    return value


def text(obj: dict, name: str, required: bool = True, default=None, max_len: int = 1000,
         min_len: int = 0, pattern: str | None = None, strip: bool = True, single_line: bool = True):
    """A string field; one line (no control character) unless single_line=False (PEM text)."""
    value = _get(obj, name, required, default)
    if value is _MISSING:
        return default
    if not isinstance(value, str):
        raise FieldError(f"{name} must be a string", name)
    if single_line and not one_line(value):  # before trimming, which would drop them silently
        raise FieldError(f"{name} must be one line without control characters", name)
    if strip:
        value = value.strip()
    if len(value) > max_len:
        raise FieldError(f"{name} must be at most {max_len} characters", name)
    if len(value) < min_len or (required and min_len == 0 and not value):
        raise FieldError(f"{name} must not be empty" if not value else
                      f"{name} must be at least {min_len} characters", name)
    if pattern and not re.fullmatch(pattern, value):
        raise FieldError(f"{name} has an invalid format", name)
    return value


def is_time(value) -> bool:
    """A stored time: a finite number of epoch seconds within TIME_MIN..TIME_MAX."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and TIME_MIN <= value <= TIME_MAX)


def boolean(obj: dict, name: str, required: bool = False, default=None):
    value = _get(obj, name, required, default)
    if value is _MISSING:
        return default
    if not isinstance(value, bool):
        raise FieldError(f"{name} must be true or false", name)
    return value


def integer(obj: dict, name: str, lo: int, hi: int, required: bool = False, default=None):
    value = _get(obj, name, required, default)
    if value is _MISSING:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(f"{name} must be a whole number", name)
    if not lo <= value <= hi:
        raise FieldError(f"{name} must be between {lo} and {hi}", name)
    return value


def choice(obj: dict, name: str, options, required: bool = False, default=None):
    value = _get(obj, name, required, default)
    if value is _MISSING:
        return default
    # same value and same type: 301.0 is not the redirect code 301, true is not 1
    if not any(type(value) is type(option) and value == option for option in options):
        raise FieldError(f"{name} must be one of {', '.join(map(str, options))}", name)
    return value


def string_list(obj: dict, name: str, required: bool = False, default=None, max_items: int = 100,
                max_len: int = 1000):
    value = _get(obj, name, required, default)
    if value is _MISSING:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FieldError(f"{name} must be a list of strings", name)
    if len(value) > max_items:
        raise FieldError(f"{name} may hold at most {max_items} items", name)
    if any(len(v) > max_len for v in value):
        raise FieldError(f"each item of {name} must be at most {max_len} characters", name)
    return value


def host(obj: dict, name: str = "host") -> str:
    """The normalised host name in field `name` (required)."""
    value = obj.get(name)
    if value is None:
        raise FieldError(f"{name} is required", name)
    try:
        return normalize_host(value)
    except HostnameError as exc:
        raise FieldError(f"{name}: {exc}", name) from None


def host_query(query: dict, name: str = "domain"):
    """The normalised host in query parameter `name`; None when absent, 400 when malformed."""
    value = query.get(name)
    if value is None:
        return None
    try:
        return normalize_host(value)
    except HostnameError as exc:
        raise FieldError(f"{name}: {exc}", name) from None
