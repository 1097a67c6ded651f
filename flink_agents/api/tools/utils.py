"""Tool argument schemas: from a function to a pydantic model, and from a
JSON schema back to a model, as Flink Agents 0.3.1's ``api/tools/utils.py``.

Docstrings are read with the ``docstring-parser`` library, so Google
(``Args:``), NumPy (``Parameters`` with dashes) and reST (``:param x:``)
styles all give parameter descriptions.

``create_model_from_java_tool_schema_str`` and
``create_java_tool_schema_str_from_model`` convert to and from the flat
schema text of 0.3.1's Java tools (``{"properties": {name: {"type",
"description"}}, "required": [...]}``). They are pure conversions; a Java
tool itself cannot run here (no JVM: a plan declaring one does not compile).
"""

from __future__ import annotations

import inspect
import json
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

from docstring_parser import parse as parse_docstring
from pydantic import BaseModel, Field, create_model
from pydantic.fields import FieldInfo

__all__ = [
    "CONSTRAINT_MAPPING",
    "TYPE_MAPPING",
    "create_java_tool_schema_str_from_model",
    "create_model_from_java_tool_schema_str",
    "create_model_from_schema",
    "create_schema_from_function",
    "docstring_description",
    "json_schema_of",
]

#: JSON schema ``type`` -> the Python type a field of that type gets.
TYPE_MAPPING: Dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
    "array": list,
    "null": type(None),
}

#: JSON schema constraint -> the ``pydantic.Field`` argument it becomes.
CONSTRAINT_MAPPING: Dict[str, str] = {
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minItems": "min_length",
    "maxItems": "max_length",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
}


def docstring_description(func: Callable[..., Any]) -> str:
    """The description part of ``func``'s docstring (summary and body,
    without the parameter and return sections), as 0.3.1 gives a tool's
    description; ``""`` when there is none."""
    return (parse_docstring(inspect.getdoc(func) or "").description or "").strip()


def create_schema_from_function(
    name: str, func: Callable[..., Any], injected_args: Any = None,
) -> Type[BaseModel]:
    """A pydantic model, named ``name``, of ``func``'s parameters.

    As 0.3.1: each parameter becomes a field typed by its annotation
    (``Any`` when there is none) with its default; its description is the
    docstring's (any style ``docstring-parser`` reads), else the string
    of ``Annotated[T, "text"]`` or of an ``Annotated[T, Field(...)]``,
    else ``"Parameter: <name>"``. A default that is a ``pydantic.Field``
    is used as the field. Unlike 0.3.1, ``*args``/``**kwargs`` are left out
    (a model cannot fill them by name) and a bound method's ``self`` is not
    a parameter.

    Args:
        name: The model's name (the tool's name).
        func: A function, a bound method or a ``staticmethod``.
        injected_args: Names of parameters the framework fills
            (``@tool(injected_args=...)``, Flink Agents HEAD): left out.

    Raises:
        TypeError: ``func`` is not callable, or has no inspectable
            signature.
        pydantic.errors.PydanticSchemaGenerationError: An annotation is a
            type pydantic cannot validate (use ``json_schema_of`` to also
            check that it has a JSON schema).
    """
    if isinstance(func, (staticmethod, classmethod)):
        func = func.__func__
    if not callable(func):
        raise TypeError(f"create_schema_from_function: func of {name!r} is a {type(func).__name__}, not callable")
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError) as exc:
        raise TypeError(f"create_schema_from_function: cannot read the signature of {name!r}: {exc}") from None
    documented = {p.arg_name: p.description for p in parse_docstring(inspect.getdoc(func) or "").params}
    hints = _type_hints(func)
    fields: Dict[str, Any] = {}
    injected = set(injected_args or ())
    for param_name, param in params.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param_name in injected:
            continue
        annotation = hints.get(param_name, param.annotation)
        if annotation is param.empty:
            annotation = Any
        elif isinstance(annotation, str):
            raise TypeError(
                f"create_schema_from_function: the annotation {annotation!r} of parameter {param_name!r} of "
                f"{name!r} does not resolve in {getattr(func, '__module__', '?')} (a name defined inside a function?)"
            )
        description = documented.get(param_name) or f"Parameter: {param_name}"
        if typing.get_origin(annotation) is typing.Annotated:
            annotation, *metadata = typing.get_args(annotation)
            for meta in metadata:
                if isinstance(meta, str):
                    description = meta
                elif isinstance(meta, FieldInfo) and meta.description:
                    description = meta.description
        if isinstance(param.default, FieldInfo):
            fields[param_name] = (annotation, param.default)
        elif param.default is param.empty:
            fields[param_name] = (annotation, Field(description=description))
        else:
            fields[param_name] = (annotation, Field(default=param.default, description=description))
    return create_model(name, **fields)


def _type_hints(func: Callable[..., Any]) -> Dict[str, Any]:
    """``func``'s annotations with strings (``from __future__ import
    annotations``) resolved in its module, ``Annotated`` kept; {} when
    they do not all resolve (each is then taken as written)."""
    target = getattr(func, "__func__", func)
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = getattr(target, "__call__", target)
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:  # a name that does not resolve in the module: leave them as written
        return {}


def json_schema_of(model: Type[BaseModel], titles: bool = False) -> Dict[str, Any]:
    """``model``'s JSON schema as a chat model is given a tool's
    parameters: ``model_json_schema()``, without the ``title`` of the model
    and of its properties unless ``titles`` (0.3.1's serialized
    ``ToolMetadata`` keeps them).

    Raises:
        TypeError: A field has no JSON schema (the message names the model).
    """
    from pydantic.errors import PydanticInvalidForJsonSchema, PydanticSchemaGenerationError

    try:
        schema = model.model_json_schema()
    except (PydanticInvalidForJsonSchema, PydanticSchemaGenerationError) as exc:
        raise TypeError(f"the arguments of {model.__name__!r} have no JSON schema: {exc}") from None
    if not titles:
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
    return schema


def _field_params(field_schema: Dict[str, Any]) -> Dict[str, Any]:
    params = {arg: field_schema[key] for key, arg in CONSTRAINT_MAPPING.items() if key in field_schema}
    if "description" in field_schema:
        params["description"] = field_schema["description"]
    if "default" in field_schema:
        params["default"] = field_schema["default"]
    return params


def create_model_from_schema(name: str, schema: Dict[str, Any]) -> Type[BaseModel]:
    """A pydantic model, named ``name``, from a JSON schema (as
    ``BaseModel.model_json_schema()`` writes one), as 0.3.1.

    Types come from ``TYPE_MAPPING``; ``array`` items and ``object``
    ``additionalProperties`` are followed, ``anyOf`` becomes a ``Union``
    (``Optional`` with ``null``), ``enum`` a ``Literal``, ``$ref`` to
    ``$defs`` a nested model; descriptions, defaults and the constraints
    of ``CONSTRAINT_MAPPING`` are kept. A property listed in
    ``required`` has no default; one that is not, and has none, defaults
    to None (0.3.1 makes it required).

    Args:
        name: The model's name.
        schema: A JSON schema of an object.

    Raises:
        TypeError: ``schema`` is not a dict, or its ``properties`` is not one.
    """
    if not isinstance(schema, dict):
        raise TypeError(f"create_model_from_schema: schema of {name!r} must be a dict, got a {type(schema).__name__}")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise TypeError(f"create_model_from_schema: 'properties' of {name!r} must be a dict")
    defs = schema.get("$defs", schema.get("definitions", {})) or {}
    models: Dict[str, Type[BaseModel]] = {}

    def resolve(field_schema: Dict[str, Any]) -> Any:
        ref = field_schema.get("$ref")
        if isinstance(ref, str):
            target = ref.rsplit("/", 1)[-1]
            if target not in models and target in defs:
                models[target] = Any  # type: ignore[assignment]  # a cycle resolves to Any
                models[target] = build(target, defs[target])
            return models.get(target, Any)
        if "enum" in field_schema and field_schema["enum"]:
            return typing.Literal[tuple(field_schema["enum"])]  # type: ignore[misc]
        options = field_schema.get("anyOf") or field_schema.get("oneOf")
        if options:
            types = [resolve(option) for option in options]
            nullable = type(None) in types
            types = [t for t in types if t is not type(None)]
            if not types:
                return type(None)
            joined = types[0] if len(types) == 1 else Union[tuple(types)]  # type: ignore[valid-type]
            return Optional[joined] if nullable else joined
        kind = field_schema.get("type")
        if isinstance(kind, list):  # {"type": ["string", "null"]}
            return resolve({"anyOf": [{**field_schema, "type": k} for k in kind]})
        if kind == "array":
            items = field_schema.get("items")
            return list[resolve(items)] if isinstance(items, dict) else list  # type: ignore[misc]
        if kind == "object":
            if "properties" in field_schema:
                return build(field_schema.get("title", f"{name}_object"), field_schema)
            extra = field_schema.get("additionalProperties")
            return Dict[str, resolve(extra)] if isinstance(extra, dict) else Dict[str, Any]  # type: ignore[misc]
        return TYPE_MAPPING.get(kind, Any) if isinstance(kind, str) else Any

    def build(model_name: str, model_schema: Dict[str, Any]) -> Type[BaseModel]:
        required = set(model_schema.get("required", ()))
        fields: Dict[str, Tuple[Any, Any]] = {}
        for field_name, field_schema in (model_schema.get("properties") or {}).items():
            params = _field_params(field_schema)
            if field_name not in required and "default" not in params:
                params["default"] = None
            fields[field_name] = (resolve(field_schema), Field(**params))
        return create_model(model_name, __doc__=model_schema.get("description", ""), **fields)  # type: ignore[call-overload]

    return build(name, schema)


def create_model_from_java_tool_schema_str(name: str, schema_str: str) -> Type[BaseModel]:
    """A pydantic model named ``name`` from a Java tool's input schema text.

    Every property becomes a required field of the Python type
    ``TYPE_MAPPING`` gives its ``type``, described by its ``description``
    (``"Parameter: <name>"`` when it has none, as 0.3.1: Java writes no
    description for a parameter without one).

    Raises:
        ValueError: The text is not a JSON object with a ``properties``
            object, or a property's ``type`` is missing or not one of
            ``TYPE_MAPPING`` (the message names the property).
    """
    try:
        schema = json.loads(schema_str)
    except json.JSONDecodeError as exc:
        raise ValueError(f"Java tool schema of {name!r} is not JSON: {exc}") from None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        raise ValueError(f"Java tool schema of {name!r} has no 'properties' object")
    fields: Dict[str, Any] = {}
    for param, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind not in TYPE_MAPPING:
            raise ValueError(
                f"Java tool schema of {name!r}: property {param!r} has type {kind!r}; "
                f"expected one of {', '.join(TYPE_MAPPING)}"
            )
        description = spec.get("description") or f"Parameter: {param}"
        fields[param] = (TYPE_MAPPING[kind], FieldInfo(description=description))
    return create_model(name, **fields)


_JSON_TYPE_OF: Dict[Any, str] = {
    str: "string", int: "integer", float: "number", bool: "boolean",
    dict: "object", list: "array", tuple: "array", set: "array", type(None): "null",
}


def _java_schema_type(annotation: Any, where: str) -> str:
    """The JSON ``type`` of a field annotation: ``Optional[X]``/``X | None``
    as ``X``, generics by their origin (``List[int]`` is an ``array``), a
    pydantic model as an ``object``."""
    origin = typing.get_origin(annotation)
    if origin is Union or (origin is not None and type(annotation).__name__ == "UnionType"):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _java_schema_type(members[0], where)
        raise TypeError(f"{where}: a union of {members} has no single Java schema type")
    if origin is typing.Annotated:
        return _java_schema_type(typing.get_args(annotation)[0], where)
    if origin is not None:
        annotation = origin
    if annotation in _JSON_TYPE_OF:
        return _JSON_TYPE_OF[annotation]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    raise TypeError(f"{where}: {annotation!r} has no Java tool schema type (string, integer, number, boolean, object, array)")


def create_java_tool_schema_str_from_model(model: Type[BaseModel]) -> str:
    """The Java tool input schema text of ``model``: the inverse of
    ``create_model_from_java_tool_schema_str`` for names, types and
    descriptions (``"Parameter: <name>"`` for a field without one), with
    ``required`` listing the fields without a default (left out when none).

    Raises:
        TypeError: A field's type has no JSON schema type (the message
            names the field).
    """
    properties: Dict[str, Dict[str, str]] = {}
    required: List[str] = []
    for field_name, info in model.model_fields.items():
        kind = _java_schema_type(info.annotation, f"{model.__name__}.{field_name}")
        properties[field_name] = {"type": kind, "description": info.description or f"Parameter: {field_name}"}
        if info.is_required():
            required.append(field_name)
    schema: Dict[str, Any] = {"properties": properties}
    if required:
        schema["required"] = required
    return json.dumps(schema, ensure_ascii=False, indent=2)
