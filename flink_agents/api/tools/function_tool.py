"""``FunctionTool``: a tool backed by a Python function (0.3.1's path; also
importable from ``flink_agents.api.tools.tool``)."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Mapping

from pydantic import ConfigDict, Field, model_validator

from flink_agents.api.decorators import TOOL_INJECTED_ARGS_ATTR, TOOL_NEEDS_APPROVAL_ATTR, TOOL_UNTRUSTED_ATTR
from flink_agents.api.function import JavaFunction, PythonFunction
from flink_agents.api.tools.tool import Tool, ToolMetadata, ToolType
from flink_agents.api.tools.tool_parameter_injection import (
    InjectedArg, merge_injected_args, normalize_injected_args, validate_injected_arg_names,
)
from flink_agents.api.tools.utils import create_schema_from_function, docstring_description, json_schema_of

__all__ = ["FunctionTool"]


def metadata_of(func: Callable[..., Any], name: str | None = None, injected_args: Any = None) -> ToolMetadata:
    """A tool's metadata from ``func``, as 0.3.1 derives it: its name, the
    docstring's description (any style ``docstring-parser`` reads; the
    function's name when there is none) and the schema of its parameters
    (``utils.create_schema_from_function``, without titles), injected
    parameters (``injected_args``' names) left out.

    Raises:
        TypeError: ``func`` is not callable, or an annotation has no JSON
            schema (the message names the tool).
    """
    tool_name = name or getattr(func, "__name__", None) or type(func).__name__
    try:
        model = create_schema_from_function(tool_name, func, injected_args)
        schema = json_schema_of(model)
    except Exception as exc:  # pydantic's schema errors name the annotation
        raise TypeError(f"tool {tool_name!r}: {exc}") from exc
    return ToolMetadata(name=tool_name, description=docstring_description(func) or tool_name, args_schema=schema)


class FunctionTool(Tool):
    """A tool backed by a Python function.

    Built with ``FunctionTool.from_callable(func)`` (or
    ``Tool.from_callable``), or as 0.3.1 builds one,
    ``FunctionTool(func=PythonFunction.from_callable(func))``: a
    ``PythonFunction`` is resolved to its callable, ``metadata``, when not
    given, is derived from the function (``metadata_of``), and
    ``untrusted`` and ``needs_approval``, when not given, are what
    ``@tool(untrusted=..., needs_approval=...)`` marked.

    ``func`` may also be a ``JavaFunction`` (a YAML ``type: java`` tool, as
    0.3.1 loads one): such a tool cannot run here (no JVM), so ``call``
    raises and a plan declaring it does not compile. Its ``metadata``, when
    not given, has the method's name and no parameters (0.3.1 reads the
    schema from the JVM).

    Attributes:
        func: The function run by ``call`` (not serialized).
        untrusted: Whether the tool's results (and errors) reach a model as
            untrusted data (``@tool(untrusted=True)``); default False: as
            they are, as in 0.3.1.
        needs_approval: Whether each call a model makes waits for a
            reviewer's approval before it runs (``@tool(needs_approval=True)``;
            docs/callbacks.md, "Approvals"); default False.
        injected_args: Parameters the framework fills at call time, hidden
            from the model (``@tool(injected_args=...)`` merged with the ones
            given here; ``api.tools.tool_parameter_injection``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    func: Callable[..., Any] | JavaFunction = Field(exclude=True)
    untrusted: bool = False
    needs_approval: bool = False
    injected_args: Dict[str, InjectedArg] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _resolve_and_describe(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "func" not in data:
            return data
        data = dict(data)
        func = data["func"]
        if isinstance(func, JavaFunction):
            if data.get("metadata") is None:
                data["metadata"] = ToolMetadata(
                    name=func.method_name, description=f"Java tool {func.describe()}",
                    args_schema={"type": "object", "properties": {}},
                )
            data["untrusted"] = bool(data.get("untrusted"))
            data["needs_approval"] = bool(data.get("needs_approval"))
            return data
        if isinstance(func, PythonFunction):
            func = data["func"] = func.as_callable()
        elif isinstance(func, (staticmethod, classmethod)):
            func = data["func"] = func.__func__
        if not callable(func):
            raise TypeError(f"FunctionTool: func must be callable or a PythonFunction, got a {type(func).__name__}")
        declared = normalize_injected_args(data.get("injected_args"))
        marked = getattr(func, TOOL_INJECTED_ARGS_ATTR, None)
        name = data["metadata"].name if isinstance(data.get("metadata"), ToolMetadata) else None
        injected = merge_injected_args(marked, declared, tool_name=name or getattr(func, "__name__", "tool"))
        validate_injected_arg_names(func, injected)
        data["injected_args"] = injected
        if data.get("metadata") is None:
            data["metadata"] = metadata_of(func, injected_args=injected)
        if data.get("untrusted") is None:  # as @tool(untrusted=...) marked the function
            data["untrusted"] = bool(getattr(func, TOOL_UNTRUSTED_ATTR, False))
        if data.get("needs_approval") is None:  # as @tool(needs_approval=...) marked it
            data["needs_approval"] = bool(getattr(func, TOOL_NEEDS_APPROVAL_ATTR, False))
        return data

    @classmethod
    def tool_type(cls) -> ToolType:
        return ToolType.FUNCTION

    @staticmethod
    def from_callable(
        func: Callable[..., Any], name: str | None = None, untrusted: bool | None = None,
        needs_approval: bool | None = None, injected_args: Mapping[str, Any] | None = None,
    ) -> "FunctionTool":
        """Build a tool from ``func``.

        Args:
            func: A function or a ``staticmethod``.
            name: The tool's name; defaults to ``func.__name__``.
            untrusted: See the class; None: as ``@tool(untrusted=...)``
                marked ``func`` (unmarked: False).
            needs_approval: See the class; None: as
                ``@tool(needs_approval=...)`` marked ``func`` (unmarked: False).
            injected_args: More injected parameters (beside ``@tool``'s).

        Raises:
            TypeError: ``func`` is not callable, or an annotation has no JSON schema.
            ValueError: An injected name is no parameter, or conflicts with ``@tool``'s.
        """
        if isinstance(func, (staticmethod, classmethod)):
            func = func.__func__
        if not callable(func):
            raise TypeError(f"tool {name or func!r} is not callable")
        injected = merge_injected_args(
            getattr(func, TOOL_INJECTED_ARGS_ATTR, None), normalize_injected_args(injected_args),
            tool_name=name or getattr(func, "__name__", "tool"),
        )
        return FunctionTool(
            metadata=metadata_of(func, name, injected), func=func, untrusted=untrusted,
            needs_approval=needs_approval, injected_args=injected,
        )

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """Run the function with ``args`` mapped onto its parameters in
        order and ``kwargs`` by name (0.3.1's ``call(*args, **kwargs)``).

        Raises:
            TypeError: The arguments do not fit the function's parameters
                (the message names the tool and its parameters); whatever
                the function raises.
            RuntimeError: ``func`` is a ``JavaFunction`` (no JVM here).
        """
        if isinstance(self.func, JavaFunction):
            raise RuntimeError(
                f"tool {self.name!r} is the Java method {self.func.describe()}: this runtime is pure Python "
                "and cannot run Java tools; write the tool in Python"
            )
        try:
            bound = inspect.signature(self.func).bind(*args, **kwargs)
        except TypeError as exc:
            params = ", ".join(inspect.signature(self.func).parameters)
            raise TypeError(f"tool {self.name!r} takes ({params}): {exc}") from None
        except ValueError:  # no signature (a builtin): let the call decide
            return self.func(*args, **kwargs)
        return self.func(*bound.args, **bound.kwargs)
