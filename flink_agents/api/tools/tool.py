"""Tools that chat models may call, with a JSON schema for their arguments."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Dict

from pydantic import BaseModel, field_validator

from flink_agents.api.resource import ResourceType, SerializableResource
from flink_agents.api.tools.utils import json_schema_of

if TYPE_CHECKING:
    from flink_agents.api.tools.function_tool import FunctionTool

__all__ = ["FunctionTool", "Tool", "ToolMetadata", "ToolType"]


class ToolType(str, Enum):
    """Where a tool's code lives (0.3.1's values)."""

    MODEL_BUILT_IN = "model_built_in"
    FUNCTION = "function"
    REMOTE_FUNCTION = "remote_function"
    MCP = "mcp"


# The keys of a JSON schema a provider is given as a tool's parameters.
_PARAMETER_KEYS = ("type", "properties", "required", "definitions", "$defs")


class ToolMetadata(BaseModel):
    """What a model is told about a tool.

    Attributes:
        name: The tool's name as the model calls it.
        description: What it does (the docstring's summary).
        args_schema: JSON schema (draft 2020-12 subset, as the OpenAI function
            calling API takes it) of the arguments. 0.3.1 keeps a pydantic
            model class here; one given is turned into its JSON schema as
            0.3.1 serializes it (``model_json_schema()``, titles kept), and
            ``utils.create_model_from_schema`` turns the schema back into a
            model. Tools made from functions (``FunctionTool``) have no
            titles in theirs.
    """

    name: str
    description: str
    args_schema: Dict[str, Any]

    @field_validator("args_schema", mode="before")
    @classmethod
    def _schema_of_model(cls, value: Any) -> Any:
        if isinstance(value, type) and issubclass(value, BaseModel):
            return json_schema_of(value, titles=True)
        return value

    def get_parameters_dict(self) -> Dict[str, Any]:
        """The schema's ``type``, ``properties``, ``required``,
        ``definitions`` and ``$defs`` (what 0.3.1 hands a provider as the
        tool's parameters)."""
        return {k: v for k, v in self.args_schema.items() if k in _PARAMETER_KEYS}


class Tool(SerializableResource, ABC):
    """A callable offered to chat models."""

    metadata: ToolMetadata

    @staticmethod
    def from_callable(func: Callable[..., Any], name: str | None = None) -> "FunctionTool":
        """A ``FunctionTool`` running ``func`` (0.3.1's ``Tool.from_callable``).

        Args:
            func: A function or a ``staticmethod``.
            name: The tool's name; defaults to ``func.__name__``.

        Raises:
            TypeError: As ``FunctionTool.from_callable``.
        """
        from flink_agents.api.tools.function_tool import FunctionTool

        return FunctionTool.from_callable(func, name=name)

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
    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the tool and return its result.

        The built-in tool action passes the model's arguments by name
        (``call(**arguments)``), or positionally when the model gave a
        list (``call(*arguments)``). 0.3.1's signature; a tool written for
        an earlier release of this project with ``call(self, **kwargs)``
        still runs.
        """


def __getattr__(name: str) -> Any:
    # ``FunctionTool`` lives in ``function_tool`` (0.3.1's path) and is
    # importable from here too; imported on first use, as that module
    # imports this one.
    if name == "FunctionTool":
        from flink_agents.api.tools.function_tool import FunctionTool

        return FunctionTool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
