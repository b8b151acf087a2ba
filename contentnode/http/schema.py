"""Request body shapes checked from the JSON schema declared on a Route.

Only the shape (JSON types, required members, no unknown members, string
lengths) lives here; record rules stay in core. The same schema is what the
OpenAPI document publishes, so the two cannot disagree.
"""

from contentnode.core.fields import FieldError

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def check(schema: dict, value, field: str | None = None) -> None:
    """Raise FieldError naming the first member that does not fit the schema."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, kind) for kind in kinds):
            raise FieldError(f"{field or 'the body'} must be {' or '.join(kinds)}", field)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            raise FieldError(f"{field} must not be empty" if schema["minLength"] == 1
                             else f"{field} must be at least {schema['minLength']} characters", field)
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise FieldError(f"{field} must be at most {schema['maxLength']} characters", field)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            unknown = sorted(set(value) - set(properties))
            if unknown:
                raise FieldError(f"unknown field {unknown[0]!r}", unknown[0][:100])
        for name in schema.get("required", ()):
            if name not in value:
                raise FieldError(f"{name} is required", name)
        for name, member in properties.items():
            if name in value:
                check(member, value[name], name if field is None else f"{field}.{name}")
    if isinstance(value, list) and "items" in schema:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise FieldError(f"{field} holds at most {schema['maxItems']} items", field)
        for item in value:
            check(schema["items"], item, field)
