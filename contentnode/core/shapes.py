"""JSON shapes: the one schema language of the node's records and request bodies.

Only the shape (JSON types, required members, no unknown members, allowed
values, number ranges, string lengths and patterns, list sizes) lives here;
record rules (what a valid host, URL or path is) stay in the record's core
module. The record tables (core/records.py) declare their fields with these
constructors, the routes declare their bodies and answers with them
(through http/schema.py), the OpenAPI document publishes them, and check()
knows every keyword a declared schema may use (KEYWORDS; a test holds every
Route to them), so anything the document calls invalid is refused here and
by a restore alike.
"""

import re

from contentnode.core.fields import FieldError

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
_WORDS = {"object": "a JSON object", "array": "a list", "string": "a string", "boolean": "true or false",
          "integer": "a whole number", "number": "a number", "null": "null"}
KEYWORDS = {"not", "type", "enum", "minLength", "maxLength", "pattern", "minimum", "maximum", "minItems", "maxItems",
            "items", "properties", "required", "additionalProperties", "description"}


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def _same(value, option) -> bool:
    """Same value and same type: 301.0 is not 301, true is not 1."""
    return type(value) is type(option) and value == option


def check(schema: dict, value, field: str | None = None) -> None:
    """Raise FieldError naming the first member that does not fit the schema."""
    name = field or "the body"
    if "not" in schema:  # only {"not": {}} (see refused): a member never taken here
        raise FieldError(f"{name} {schema.get('description', 'is not accepted here')}", field)
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, kind) for kind in kinds):
            raise FieldError(f"{name} must be {' or '.join(_WORDS[kind] for kind in kinds)}", field)
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        raise FieldError(f"{name} must be one of {', '.join(map(_shown, schema['enum']))}", field)
    if isinstance(value, str):
        _check_text(schema, value, name, field)
    elif _is(value, "number"):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            raise FieldError(f"{name} must be between {schema.get('minimum')} and {schema.get('maximum')}", field)
    elif isinstance(value, dict):
        _check_object(schema, value, field)
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise FieldError(f"{name} must not be empty" if schema["minItems"] == 1
                             else f"{name} must hold at least {schema['minItems']} items", field)
        if len(value) > schema.get("maxItems", len(value)):
            raise FieldError(f"{name} may hold at most {schema['maxItems']} items", field)
        if "items" in schema:
            for item in value:
                check(schema["items"], item, field)


def _check_text(schema: dict, value: str, name: str, field) -> None:
    if len(value) < schema.get("minLength", 0):
        raise FieldError(f"{name} must not be empty" if schema["minLength"] == 1
                         else f"{name} must be at least {schema['minLength']} characters", field)
    if len(value) > schema.get("maxLength", len(value)):
        raise FieldError(f"{name} must be at most {schema['maxLength']} characters", field)
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise FieldError(f"{name} has an invalid format", field)


def _check_object(schema: dict, value: dict, field) -> None:
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    if extra is False:
        unknown = sorted(set(value) - set(properties))
        if unknown:
            shown = unknown[0] if field is None else f"{field}.{unknown[0]}"
            raise FieldError(f"unknown field {shown!r}", shown[:100])
    for name in schema.get("required", ()):
        if name not in value:
            shown = name if field is None else f"{field}.{name}"
            raise FieldError(f"{shown} is required", shown)
    for name, member in value.items():
        rule = properties.get(name, extra)
        if isinstance(rule, dict):
            check(rule, member, name if field is None else f"{field}.{name}")


def _shown(option) -> str:
    return "null" if option is None else str(option).lower() if isinstance(option, bool) else str(option)


# ---------------------------------------------------------------- constructors


def obj(properties: dict, required=(), description: str | None = None) -> dict:
    """A JSON object with exactly these members (unknown ones are refused)."""
    schema: dict = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def text(max_length: int, min_length: int = 1, pattern: str | None = None) -> dict:
    schema: dict = {"type": "string", "minLength": min_length, "maxLength": max_length}
    if pattern is not None:
        schema["pattern"] = pattern
    return schema


def integer(minimum: int, maximum: int) -> dict:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


BOOLEAN = {"type": "boolean"}


def one_of(*values) -> dict:
    return {"enum": list(values)}


def array(items: dict, max_items: int | None = None, min_items: int = 0) -> dict:
    schema: dict = {"type": "array", "items": items}
    if max_items is not None:
        schema["maxItems"] = max_items
    if min_items:
        schema["minItems"] = min_items
    return schema


STRING = {"type": "string"}


def answer(properties: dict, optional=()) -> dict:
    """An object the node answers: these members (all present but `optional`); later members may be added."""
    return {"type": "object", "required": [name for name in properties if name not in optional],
            "properties": properties}


def listing(plural: str, item: dict) -> dict:
    """A list answer: {"<plural>": [item, ...]}."""
    return answer({plural: {"type": "array", "items": item}})


def refused(reason: str) -> dict:
    """A member this body never takes, and why ("is changed with PUT /api/x"): the reason is the message."""
    return {"not": {}, "description": reason}


def nullable(schema: dict) -> dict:
    """The same member, or null (which the handler reads as "absent" or "clear")."""
    if "enum" in schema:
        return dict(schema, enum=[*schema["enum"], None])
    return dict(schema, type=[schema["type"], "null"])
