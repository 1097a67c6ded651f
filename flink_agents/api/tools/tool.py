"""Tools that chat models may call, with a JSON schema for their arguments."""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, Callable, Dict

from pydantic import BaseModel, ConfigDict, Field, create_model

from flink_agents.api.resource import ResourceType, SerializableResource

__all__ = ["FunctionTool", "Tool", "ToolMetadata", "ToolType"]


class ToolType(str, Enum):
    """Where a tool's code lives."""

    FUNCTION = "function"
    MCP = "mcp"


class ToolMetadata(BaseModel):
    """What a model is told about a tool.

    Attributes:
        name: The tool's name as the model calls it.
        description: What it does (the docstring's summary).
        args_schema: JSON schema (draft 2020-12 subset, as the OpenAI function
            calling API takes it) of the keyword arguments.
    """

    name: str
    description: str
    args_schema: Dict[str, Any]


class Tool(SerializableResource, ABC):
    """A callable offered to chat models."""

    metadata: ToolMetadata

    @classmethod
    def resource_type(cls) -> ResourceType:
        return ResourceType.TOOL

    @property
    def name(self) -> str:
        return self.metadata.name

    @classmethod
    @abstractmethod
    def tool_type(cls) -> ToolType:
        """The kind of tool."""

    @abstractmethod
    def call(self, **kwargs: Any) -> Any:
        """Run the tool with the model's arguments and return its result."""


_ARG_LINE = re.compile(r"^(\s*)\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")


def _parse_google_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary and per-argument descriptions of a Google-style docstring."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    arg_indent: int | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        stripped = line.strip()
        if _SECTION.match(stripped) and not line.startswith(" "):
            section = "args" if stripped in ("Args:", "Arguments:", "Parameters:") else "other"
            current, arg_indent = None, None
            continue
        if section == "summary":
            if stripped:
                summary_lines.append(stripped)
            elif summary_lines:
                section = "description"
        elif section == "args" and stripped:
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(line)
            if match and (arg_indent is None or indent == arg_indent):
                arg_indent = indent
                current = match.group(2)
                args[current] = match.group(3).strip()
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary_lines), args


def _schema_from_signature(fn: Callable[..., Any], arg_docs: dict[str, str]) -> dict:
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = Any if param.annotation is inspect.Parameter.empty else param.annotation
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, Field(default, description=arg_docs.get(name)))
    model = create_model(f"{fn.__name__}_args", **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return schema


class FunctionTool(Tool):
    """A tool backed by a Python function.

    The schema comes from the signature (annotations, defaults) and the
    Google-style docstring (summary, ``Args:`` descriptions).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    func: Callable[..., Any] = Field(exclude=True)

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.FUNCTION

    @staticmethod
    def from_callable(func: Callable[..., Any], name: str | None = None) -> "FunctionTool":
        """Build a tool from ``func``.

        Raises:
            TypeError: ``func`` is not callable, or an annotation has no JSON schema.
        """
        if isinstance(func, staticmethod):
            func = func.__func__
        if not callable(func):
            raise TypeError(f"tool {name or func!r} is not callable")
        summary, arg_docs = _parse_google_docstring(func.__doc__ or "")
        metadata = ToolMetadata(
            name=name or func.__name__,
            description=summary or func.__name__,
            args_schema=_schema_from_signature(func, arg_docs),
        )
        return FunctionTool(metadata=metadata, func=func)

    def call(self, **kwargs: Any) -> Any:
        return self.func(**kwargs)
