"""Filling injected tool parameters at call time (``@tool(injected_args=...)``,
Flink Agents HEAD; ``api.tools.tool_parameter_injection``).

The built-in tool action calls ``inject_arguments`` after the model's
arguments are parsed and before they are checked against the function and
journaled: the injected values overwrite the model's under the same names,
and become part of the journaled call's arguments (its input digest), so a
replay that reads other values is a divergence, not a silent change.
"""

from __future__ import annotations

from typing import Any, Dict

from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.tools.tool_parameter_injection import InjectedArg, ToolParameterSource

__all__ = ["ToolInjectionError", "inject_arguments"]


class ToolInjectionError(ValueError):
    """An injected parameter whose source has no value (the call fails; the model is told)."""


def inject_arguments(tool_name: str, injected: Dict[str, InjectedArg], arguments: Any, ctx: Any) -> Any:
    """``arguments`` (a dict, or a list of positional values) with each
    injected parameter set from its source.

    Raises:
        ToolInjectionError: A config key or memory path is missing, a path
            holds an object, or the model passed positional arguments to a
            tool with injected parameters; the message names tool, parameter
            and source.
    """
    if not injected:
        return arguments
    if isinstance(arguments, list):
        if arguments:
            raise ToolInjectionError(
                f"tool {tool_name!r} has injected parameters; call it with named arguments, not a list"
            )
        arguments = {}
    filled = dict(arguments)
    for param, spec in injected.items():
        filled[param] = _value(tool_name, param, spec, ctx)
    return filled


def _value(tool_name: str, param: str, spec: InjectedArg, ctx: Any) -> Any:
    key = spec.key or param
    where = f"tool {tool_name!r}, injected parameter {param!r}"
    if spec.source == ToolParameterSource.CONFIG:
        config = ctx.config
        if key not in config:
            raise ToolInjectionError(f"{where}: config has no key {key!r}")
        return config[key]
    memory = ctx.sensory_memory if spec.source == ToolParameterSource.SENSORY_MEMORY else ctx.short_term_memory
    if not memory.is_exist(key):
        raise ToolInjectionError(f"{where}: {spec.source.value} has no path {key!r}")
    value = memory.get(key)
    if isinstance(value, MemoryObject):
        raise ToolInjectionError(f"{where}: {spec.source.value} path {key!r} holds an object, not a value")
    return value

