"""Tool parameters the framework fills at call time (Flink Agents HEAD's
``@tool(injected_args=...)``).

An injected parameter is left out of the schema a model sees, so the model
cannot set it; when the built-in tool action runs a call, each injected
parameter gets its value from the job configuration or from memory, and
that value wins over any value the model sent under the same name (a
tenant id cannot be spoofed by a tool call). Sources:

* ``config``: ``ctx.config`` key ``key`` (the job's agent configuration);
* ``sensory_memory`` (the default source) / ``short_term_memory``: the
  value at memory path ``key`` as the calling action sees it.

``key`` defaults to the parameter's name. A missing config key or memory
path, or a path holding an object rather than a value, fails that tool call:
the model gets the error as the call's result, as for a tool that raised.
The resolved arguments are part of the journaled call (its input digest),
so a replay sees the same values.
"""

from __future__ import annotations

import inspect
from enum import Enum
from typing import Any, Callable, Dict, Mapping

from pydantic import BaseModel, ConfigDict

__all__ = [
    "InjectedArg",
    "ToolParameterSource",
    "merge_injected_args",
    "normalize_injected_args",
    "validate_injected_arg_names",
]


class ToolParameterSource(str, Enum):
    """Where an injected tool parameter's value comes from (case-insensitive)."""

    CONFIG = "config"
    SENSORY_MEMORY = "sensory_memory"
    SHORT_TERM_MEMORY = "short_term_memory"

    @classmethod
    def _missing_(cls, value: object) -> "ToolParameterSource | None":
        if isinstance(value, str):
            for source in cls:
                if source.value == value.lower():
                    return source
        return None


class InjectedArg(BaseModel):
    """Where one injected parameter's value comes from.

    Attributes:
        source: ``ToolParameterSource`` (default ``sensory_memory``).
        key: Config key or memory path; None: the parameter's name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: ToolParameterSource = ToolParameterSource.SENSORY_MEMORY
    key: str | None = None

    @staticmethod
    def from_config(key: str) -> "InjectedArg":
        """The value of config key ``key``."""
        return InjectedArg(source=ToolParameterSource.CONFIG, key=key)

    @staticmethod
    def from_sensory_memory(path: str) -> "InjectedArg":
        """The value at sensory memory path ``path``."""
        return InjectedArg(source=ToolParameterSource.SENSORY_MEMORY, key=path)

    @staticmethod
    def from_short_term_memory(path: str) -> "InjectedArg":
        """The value at short-term memory path ``path``."""
        return InjectedArg(source=ToolParameterSource.SHORT_TERM_MEMORY, key=path)

    def with_default_key(self, key: str) -> "InjectedArg":
        """This binding, with ``key`` when it names none."""
        return self if self.key else InjectedArg(source=self.source, key=key)


def normalize_injected_args(injected_args: Mapping[str, Any] | None) -> Dict[str, InjectedArg]:
    """``{parameter: InjectedArg}`` from what users write: ``InjectedArg``
    values or dicts (``{"source": "config", "key": "tenant"}``, as in YAML),
    each key defaulted to its parameter's name.

    Raises:
        TypeError: Not a mapping, or a spec is neither an ``InjectedArg`` nor a dict.
        pydantic.ValidationError: A dict spec has an unknown source or key.
    """
    if injected_args is None:
        return {}
    if not isinstance(injected_args, Mapping):
        raise TypeError("injected_args must map parameter names to injection specs")
    result: Dict[str, InjectedArg] = {}
    for name, spec in injected_args.items():
        if isinstance(spec, InjectedArg):
            result[name] = spec.with_default_key(name)
        elif isinstance(spec, dict):
            result[name] = InjectedArg.model_validate(spec).with_default_key(name)
        else:
            raise TypeError(f"injected_args[{name!r}] must be an InjectedArg or a dict, got {spec!r}")
    return result


def merge_injected_args(
    annotated: Mapping[str, InjectedArg] | None, declared: Mapping[str, InjectedArg] | None, *, tool_name: str,
) -> Dict[str, InjectedArg]:
    """``@tool``'s injected args with those given where the tool is built.

    Raises:
        ValueError: Both bind one parameter differently (names the tool).
    """
    merged = dict(annotated or {})
    for name, spec in (declared or {}).items():
        if name in merged and merged[name] != spec:
            raise ValueError(f"tool {tool_name!r}: injected_args conflict for parameter {name!r}")
        merged[name] = spec
    return merged


def validate_injected_arg_names(func: Callable[..., Any], injected_args: Mapping[str, InjectedArg]) -> None:
    """Raises: ValueError: an injected name is no parameter of ``func`` (unless it takes ``**kwargs``)."""
    if not injected_args:
        return
    parameters = inspect.signature(func).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = sorted(name for name in injected_args if name not in parameters)
    if unknown:
        raise ValueError(
            f"injected tool parameter(s) {', '.join(unknown)} are not parameters of "
            f"{getattr(func, '__qualname__', func)!r}"
        )
