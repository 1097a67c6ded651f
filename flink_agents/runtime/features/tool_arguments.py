"""A model's tool-call arguments, read and checked before the tool runs.

A model may send arguments that are not JSON (``{"x": 4,``), JSON that is
not an object or a list, or an object that does not fit the tool's
parameters (a required one missing, a value of the wrong type). None of
these is the record's failure: as LangChain's ``ToolNode`` and Pydantic AI
do, the built-in tool action gives the model a ``ToolArgumentsError`` as
that call's error result (naming the tool and the problem), journaled like
any tool result, and the model may correct the call in its next round
(bounded by ``chat.max_tool_rounds``; ``runtime.builtin_actions``).

The parameters are checked against the pydantic model of the function's
signature (``api.tools.utils.create_schema_from_function``, the model the
tool's JSON schema came from), in pydantic's lax mode (a JSON number for a
``float``, ISO text for a ``datetime``). The function still receives the
arguments as the model sent them (as before this check). Tools without a
Python function of their own (MCP tools, ``Tool`` subclasses overriding
``call``) are not checked here: their servers and code check them.
"""

from __future__ import annotations

import functools
import inspect
import json
from typing import Any, Callable, Dict, List, Type

from pydantic import BaseModel, ValidationError

from flink_agents.api.tools.utils import create_schema_from_function

__all__ = ["ToolArgumentsError", "check_arguments", "parse_arguments"]

_MAX_SHOWN = 500  # characters of the model's text quoted in an error


class ToolArgumentsError(ValueError):
    """A model called a tool with arguments it cannot take; the text goes
    back to the model as the call's error result.

    Attributes:
        tool: The tool's name, as the model gave it.
        problem: What is wrong (the JSON error, or pydantic's validation
            errors), without the tool's name.
    """

    def __init__(self, tool: Any, problem: str) -> None:
        super().__init__(f"tool {tool!r}: {problem}")
        self.tool = tool
        self.problem = problem


def parse_arguments(tool: str, arguments: Any) -> Dict[str, Any] | List[Any]:
    """The arguments of a call of ``tool``: a dict (by name) or a list
    (positional, as 0.3.1's ``Tool.call(*args)``); a str is read as JSON
    first (a blank one, or None: no arguments).

    Raises:
        ToolArgumentsError: The text is not JSON (the message gives the
            JSON error, its position and the text, cut at 500 characters),
            or the arguments are neither an object nor a list.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ToolArgumentsError(
                tool, f"the arguments are not valid JSON ({exc.msg} at char {exc.pos}): {_shown(arguments)}; "
                "send them as one JSON object",
            ) from None
    if not isinstance(arguments, (dict, list)):
        raise ToolArgumentsError(
            tool, f"the arguments must be a JSON object, got {_shown(json.dumps(arguments, default=str))}",
        )
    return arguments


def check_arguments(tool: str, func: Callable[..., Any] | None, arguments: Dict[str, Any] | List[Any]) -> None:
    """Check arguments by name against ``func``'s parameters (see the module
    docstring); positional arguments and a tool without ``func`` pass.

    Raises:
        ToolArgumentsError: The arguments do not fit; the message lists
            each field with pydantic's error (``x: Field required``,
            ``x: Input should be a valid integer``).
    """
    if func is None or not isinstance(arguments, dict):
        return
    try:
        model = _parameters_model(tool, func)
    except TypeError:  # an unhashable callable: not cached
        model = _parameters_model.__wrapped__(tool, func)
    if model is None:
        return
    try:
        model.model_validate(arguments)
    except ValidationError as invalid:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(arguments)'}: {error['msg']}"
            for error in invalid.errors(include_url=False)
        )
        raise ToolArgumentsError(tool, f"the arguments do not fit its parameters: {problems}") from None


@functools.lru_cache(maxsize=1024)
def _parameters_model(tool: str, func: Callable[..., Any]) -> Type[BaseModel] | None:
    """The pydantic model of ``func``'s parameters; None for a function whose
    signature cannot be read (a builtin) or whose parameters pydantic cannot
    validate (the call itself then decides)."""
    try:
        inspect.signature(func)
        return create_schema_from_function(tool, func)
    except (TypeError, ValueError):
        return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "...")
