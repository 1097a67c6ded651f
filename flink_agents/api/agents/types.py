"""``OutputSchema``: the type a chat model's final answer must have
(structured output), as in Flink Agents 0.3.1's ``api/agents/types.py``.

A schema is one of:

- a pydantic model class: the answer is validated into an instance;
- a ``pyflink.common.typeinfo.RowTypeInfo`` of basic types: the answer is a
  JSON object with those fields, returned as a ``pyflink.common.Row``;
- a JSON schema (a ``dict``, draft 2020-12): the answer is validated with
  ``jsonschema`` and returned as the parsed JSON value.

It serializes as 0.3.1's does (``{"output_schema": {"module", "class"}}`` for
a model, ``{"names", "types"}`` for a row type) plus ``{"json_schema": ...}``
for a JSON schema, so it can travel in events and keyed state.
"""

from __future__ import annotations

import copy
import functools

import importlib
import json
import sys
from typing import Any, Callable, Dict, List

from pydantic import BaseModel, ConfigDict, ValidationError, model_serializer, model_validator

__all__ = ["OutputSchema", "OutputValidationError", "REASK_MARK"]

# ``extra_args`` flag of the user message in which the built-in chat action
# asks again for an answer matching the schema (a model that reads the last
# user message as its input, like the offline ``local`` model, skips it).
REASK_MARK = "output_schema_reask"

_MAX_SHOWN = 300


def _import_class(module: str, qualname: str) -> type:
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


# How a serialized schema's model class is found again: by importing it,
# unless the runtime installed its resolver, which also knows classes that
# came by value to a Flink worker (a job script's ``__main__``; see
# ``runtime.durability.codec_classes``).
_resolve_class: Callable[[str, str], type] = _import_class


def use_class_resolver(resolver: Callable[[str, str], type]) -> None:
    """Find serialized schema classes with ``resolver(module, qualname)``
    (the runtime installs the codec's class registry here)."""
    global _resolve_class
    _resolve_class = resolver


class OutputValidationError(ValueError):
    """An answer does not match its ``OutputSchema``.

    Attributes:
        schema_name: The schema's name (model class name, JSON schema title).
        field: Where the first problem is (``"reasons[1]"``; ``""`` for the
            whole answer, e.g. when it is not JSON at all).
        problem: What is wrong there.
        text: The answer's text (the first 300 characters in the message).
    """

    def __init__(self, schema_name: str, field: str, problem: str, text: str) -> None:
        shown = text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
        where = f"field {field!r}" if field else "the answer"
        super().__init__(f"answer does not match output schema {schema_name!r}: {where}: {problem}; text: {shown!r}")
        self.schema_name = schema_name
        self.field = field
        self.problem = problem
        self.text = text


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _strip_fences(text: str) -> str:
    """The JSON inside a Markdown code fence, which some models add even
    when asked for bare JSON; other text unchanged."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and stripped.count("\n") >= 1:
        return stripped[stripped.index("\n") + 1:-3].strip()
    return stripped


@functools.lru_cache(maxsize=256)
def _model_json_schema(model: type) -> Dict[str, Any]:
    """``model.model_json_schema()``, once per class: generating it costs
    more than the rest of building a request (it is asked for on every
    structured chat call). Callers get a deep copy."""
    return model.model_json_schema()


class OutputSchema(BaseModel):
    """What a structured answer must be (see the module docstring).

    Attributes:
        output_schema: A pydantic model class, a ``RowTypeInfo``, or a JSON
            schema ``dict``.

    Raises:
        TypeError: ``output_schema`` is none of these, a row type has a
            field that is not of a basic type (named), or a JSON schema is
            not valid under draft 2020-12 (names where).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)
    output_schema: Any

    def __init__(self, output_schema: Any = None, **data: Any) -> None:
        super().__init__(output_schema=output_schema, **data)

    @model_validator(mode="before")
    @classmethod
    def _rebuild(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        schema = data.get("output_schema")
        if isinstance(schema, dict) and set(schema) == {"module", "class"}:
            data = {**data, "output_schema": _resolve_class(schema["module"], schema["class"])}
        elif isinstance(schema, dict) and set(schema) == {"names", "types"}:
            from pyflink.common.typeinfo import BasicType, BasicTypeInfo, RowTypeInfo

            data = {**data, "output_schema": RowTypeInfo(
                [BasicTypeInfo(BasicType(t)) for t in schema["types"]], list(schema["names"])
            )}
        elif isinstance(schema, dict) and set(schema) == {"json_schema"}:
            data = {**data, "output_schema": schema["json_schema"]}
        value = data.get("output_schema")
        if not (_is_model(value) or _is_row_type(value) or isinstance(value, dict)):
            raise TypeError(
                "output_schema must be a pydantic model class, a RowTypeInfo or a JSON schema dict, "
                f"not {type(value).__name__} ({value!r:.80})"
            )
        if _is_row_type(value):
            for name, field_type in zip(value.get_field_names(), value.get_field_types()):
                if getattr(field_type, "_basic_type", None) is None:
                    raise TypeError(
                        f"output_schema RowTypeInfo field {name!r} is a {field_type}: only basic types "
                        "(Types.STRING(), INT(), DOUBLE(), BOOLEAN(), ...) are supported, as in Flink Agents "
                        "0.3.1; use a pydantic model for nested or list fields"
                    )
        elif isinstance(value, dict):
            import jsonschema

            try:
                jsonschema.Draft202012Validator.check_schema(value)
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
                raise TypeError(f"output_schema is not a valid JSON schema (draft 2020-12) at {where}: {exc.message}") from None
        return data

    @model_serializer
    def _serialize(self) -> Dict[str, Any]:
        schema = self.output_schema
        if _is_row_type(schema):
            return {"output_schema": {
                "names": list(schema.get_field_names()),
                "types": [t._basic_type.value for t in schema.get_field_types()],
            }}
        if isinstance(schema, dict):
            return {"output_schema": {"json_schema": schema}}
        return {"output_schema": {"module": schema.__module__, "class": schema.__qualname__}}

    @property
    def name(self) -> str:
        """A name for the schema: the model's class name, the JSON schema's
        ``title``, else ``"output"`` (providers want one, e.g. OpenAI's
        ``json_schema.name``: letters, digits, ``_`` and ``-``)."""
        schema = self.output_schema
        if isinstance(schema, dict):
            title = str(schema.get("title") or "output")
        elif _is_row_type(schema):
            title = "row"
        else:
            title = schema.__name__
        return "".join(c if c.isalnum() or c in "_-" else "_" for c in title)[:64] or "output"

    def json_schema(self) -> Dict[str, Any]:
        """The JSON schema of an answer (a ``dict``; a model's is pydantic's
        ``model_json_schema()``, a row type's an object of its fields)."""
        schema = self.output_schema
        if isinstance(schema, dict):
            return dict(schema)
        if _is_row_type(schema):
            return {
                "title": "row",
                "type": "object",
                "properties": {n: _row_field_schema(t) for n, t in zip(schema.get_field_names(), schema.get_field_types())},
                "required": list(schema.get_field_names()),
            }
        return copy.deepcopy(_model_json_schema(schema))

    def parse(self, text: str) -> Any:
        """The answer ``text`` as the schema's value.

        Returns:
            A model instance, a ``Row`` (fields in the row type's order), or
            the parsed JSON value (JSON schema).

        Raises:
            OutputValidationError: ``text`` is not JSON (a Markdown code fence
                around it is allowed) or does not match; names the field.
        """
        raw = _strip_fences(text or "")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OutputValidationError(self.name, "", f"not JSON ({exc.msg} at char {exc.pos})", text or "") from None
        schema = self.output_schema
        if isinstance(schema, dict):
            return self._check_json_schema(value, text)
        if _is_row_type(schema):
            self._check_json_schema(value, text)
            from pyflink.common import Row

            return Row(**{n: value[n] for n in schema.get_field_names()})
        try:
            return schema.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise OutputValidationError(self.name, _path(first.get("loc", ())), first.get("msg", str(exc)), text) from None

    def _check_json_schema(self, value: Any, text: str) -> Any:
        import jsonschema

        validator = jsonschema.Draft202012Validator(self.json_schema())
        errors: List[Any] = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            raise OutputValidationError(self.name, _path(first.absolute_path), first.message, text)
        return value


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def _is_row_type(value: Any) -> bool:
    # A RowTypeInfo exists only once pyflink's typeinfo module is loaded: a
    # local run that never touched pyflink does not pay for importing it.
    typeinfo = sys.modules.get("pyflink.common.typeinfo")
    return typeinfo is not None and isinstance(value, typeinfo.RowTypeInfo)


def _row_field_schema(type_info: Any) -> Dict[str, Any]:
    name = str(getattr(getattr(type_info, "_basic_type", None), "value", "")).upper()
    if name == "BOOLEAN":
        return {"type": "boolean"}
    if name in ("BYTE", "SHORT", "INTEGER", "LONG", "BIGINTEGER"):
        return {"type": "integer"}
    if name in ("FLOAT", "DOUBLE", "BIGDECIMAL"):
        return {"type": "number"}
    return {"type": "string"}
