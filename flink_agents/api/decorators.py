"""Decorators that declare an agent's actions and resources on its class.

Use them under ``@staticmethod``-style functions of an ``Agent`` subclass::

    class MyAgent(Agent):
        @action(InputEvent)
        @staticmethod
        def on_input(event: InputEvent, ctx: RunnerContext) -> None: ...
"""

from __future__ import annotations

from typing import Any, Callable, Dict, TypeVar

from flink_agents.api.events.event import Event
from flink_agents.api.function import Function, JavaFunction, PythonFunction
from flink_agents.api.resource import ResourceType

__all__ = [
    "ActionDeclarationError",
    "JAVA_RESOURCE_ATTR",
    "action",
    "chat_model_connection",
    "chat_model_setup",
    "embedding_model_connection",
    "embedding_model_setup",
    "java_resource",
    "mcp_server",
    "prompt",
    "skills",
    "tool",
    "vector_store",
]

# 0.3.1's attribute names, which 0.3.1 code may read.
ACTION_ATTR = "_listen_events"
ACTION_TARGET_ATTR = "_target"
JAVA_RESOURCE_ATTR = "_is_java_resource"
ACTION_CONFIG_ATTR = "_flink_agents_action_config"
RESOURCE_ATTR = "_flink_agents_resource_type"
TOOL_UNTRUSTED_ATTR = "_flink_agents_tool_untrusted"
TOOL_NEEDS_APPROVAL_ATTR = "_flink_agents_tool_needs_approval"
TOOL_INJECTED_ARGS_ATTR = "_flink_agents_tool_injected_args"


def _function_of(obj: Any) -> Callable[..., Any]:
    return obj.__func__ if isinstance(obj, staticmethod) else obj


class ActionDeclarationError(TypeError, AssertionError):
    """An ``@action`` without events, or with an entry that is neither an
    Event class nor a str. Also an ``AssertionError``, which 0.3.1 raises
    there (code that catches that keeps working)."""


def _check_target(target: Function, owner: str) -> None:
    """A ``target`` names a function: both of its names are set (0.3.1's check)."""
    if isinstance(target, PythonFunction) and not (target.module and target.qualname):
        raise ValueError(f"PythonFunction target on {owner!r} must set both module and qualname")
    if isinstance(target, JavaFunction) and not (target.qualname and target.method_name):
        raise ValueError(f"JavaFunction target on {owner!r} must set both qualname and method_name")


def action(
    *trigger_conditions: type[Event] | str, target: Function | None = None, **config: Any
) -> Callable[[Any], Any]:
    """Mark a function as an action triggered by ``trigger_conditions``.

    Args:
        *trigger_conditions: Event classes, event-type strings
            (``EventType.InputEvent``, ``"my_event"``, quoted
            ``"'order:created'"``) or, as in Flink Agents HEAD, condition
            expressions (``"type == EventType.InputEvent && score > 5"``),
            combined with OR. A string is an event type when it is a bare
            (dotted) name or a quoted one, else an expression; expressions
            are checked when the plan is compiled
            (``flink_agents.api.trigger_conditions``). 0.3.1 takes event-type
            strings only.
        target: 0.3.1's cross-language target: a ``Function`` descriptor
            run instead of the decorated body. A ``PythonFunction`` target
            runs here; a ``JavaFunction`` one makes the plan fail to compile
            (no JVM in this runtime).
        **config: Values the action reads through ``ctx.action_config``.

    Raises:
        ActionDeclarationError: No condition given, or an entry is neither
            an Event class nor a str.
        TypeError: ``target`` is not a ``Function`` descriptor.
        ValueError: ``target`` lacks one of its names.
    """
    if not trigger_conditions:
        raise ActionDeclarationError("@action needs at least one event type or trigger condition")
    for ev in trigger_conditions:
        if not (isinstance(ev, str) or (isinstance(ev, type) and issubclass(ev, Event))):
            raise ActionDeclarationError(
                f"@action takes Event classes, event-type strings or condition expressions, not {ev!r}")
    listen_events = trigger_conditions
    if target is not None and not isinstance(target, Function):
        raise TypeError(
            f"action(target=...) must be an api-layer Function descriptor (PythonFunction, JavaFunction), "
            f"got a {type(target).__name__}"
        )

    def mark(fn: Any) -> Any:
        function = _function_of(fn)
        if target is not None:
            _check_target(target, getattr(function, "__qualname__", repr(function)))
            setattr(function, ACTION_TARGET_ATTR, target)
        setattr(function, ACTION_ATTR, tuple(listen_events))
        setattr(function, ACTION_CONFIG_ATTR, dict(config))
        return fn

    return mark


C = TypeVar("C", bound=type)


def java_resource(cls: C) -> C:
    """Mark ``cls`` as a Java resource (0.3.1's decorator; its wrapper
    classes in ``api.chat_models.java_chat_model`` and siblings carry it).

    Such a resource lives on the JVM in 0.3.1; this runtime is pure Python,
    so a plan declaring one fails to compile, naming it."""
    setattr(cls, JAVA_RESOURCE_ATTR, True)
    return cls


def _resource_marker(kind: ResourceType) -> Callable[[Any], Any]:
    def mark(func: Any) -> Any:  # "func", as Flink Agents 0.3.1's decorators name it
        setattr(_function_of(func), RESOURCE_ATTR, kind)
        return func

    return mark


def tool(
    func: Any = None, *, untrusted: bool = False, needs_approval: bool = False,
    injected_args: Dict[str, Any] | None = None,
) -> Any:
    """Mark a function as a tool; its schema comes from its signature and docstring.

    ``@tool`` as in Flink Agents 0.3, or ``@tool(untrusted=True)`` for a tool
    whose results carry text from outside (a web page, an e-mail, a ticket,
    another service's answer): its results and errors then reach the model
    as untrusted data, in a block the text cannot close
    (docs/tools_and_retrieval.md, "Untrusted tool results"). The default,
    ``False``, hands the model the result as it is, as 0.3 does.

    ``@tool(needs_approval=True)``: each call a model makes waits for a
    reviewer (``flink-agents approvals approve|reject``, or the inspector)
    as a durable callback; approved, the tool runs; rejected or timed out,
    it does not and the model is told why (docs/callbacks.md, "Approvals").

    ``@tool(injected_args={"tenant": InjectedArg.from_config("tenant")})``
    (Flink Agents HEAD): parameters hidden from the model's schema and
    filled at call time from the config or memory
    (``flink_agents.api.tools.tool_parameter_injection``).

    Raises:
        TypeError, pydantic.ValidationError: A malformed ``injected_args``.
        ValueError: An injected name is not a parameter of the function.
    """
    from flink_agents.api.tools.tool_parameter_injection import (
        normalize_injected_args, validate_injected_arg_names,
    )

    injected = normalize_injected_args(injected_args)

    def mark(fn: Any) -> Any:
        if injected:
            validate_injected_arg_names(_function_of(fn), injected)
            setattr(_function_of(fn), TOOL_INJECTED_ARGS_ATTR, injected)
        setattr(_function_of(fn), RESOURCE_ATTR, ResourceType.TOOL)
        if untrusted:
            setattr(_function_of(fn), TOOL_UNTRUSTED_ATTR, True)
        if needs_approval:
            setattr(_function_of(fn), TOOL_NEEDS_APPROVAL_ATTR, True)
        return fn

    return mark if func is None else mark(func)


prompt = _resource_marker(ResourceType.PROMPT)
prompt.__doc__ = "Mark a function returning a ``Prompt``."
chat_model_connection = _resource_marker(ResourceType.CHAT_MODEL_CONNECTION)
chat_model_connection.__doc__ = "Mark a function returning a connection's ``ResourceDescriptor``."
chat_model_setup = _resource_marker(ResourceType.CHAT_MODEL)
chat_model_setup.__doc__ = "Mark a function returning a chat model setup's ``ResourceDescriptor``."
skills = _resource_marker(ResourceType.SKILLS)
skills.__doc__ = "Mark a function returning a ``Skills`` (where SKILL.md skills come from), as Flink Agents 0.3.1's ``@skills``."
embedding_model_connection = _resource_marker(ResourceType.EMBEDDING_MODEL_CONNECTION)
embedding_model_connection.__doc__ = (
    "Mark a function returning an embedding model connection's ``ResourceDescriptor``, as Flink Agents 0.3.1's."
)
embedding_model_setup = _resource_marker(ResourceType.EMBEDDING_MODEL)
embedding_model_setup.__doc__ = (
    "Mark a function returning an embedding model setup's ``ResourceDescriptor``, as Flink Agents 0.3.1's; "
    "inside an action ``ctx.get_resource(name, ResourceType.EMBEDDING_MODEL)`` gives the setup, "
    "whose ``embed``/``aembed`` calls are journaled."
)
vector_store = _resource_marker(ResourceType.VECTOR_STORE)
vector_store.__doc__ = "Mark a function returning a vector store's ``ResourceDescriptor`` (``flink_agents.api.vector_stores``)."
mcp_server = _resource_marker(ResourceType.MCP_SERVER)
mcp_server.__doc__ = (
    "Mark a function returning an ``MCPServer``'s ``ResourceDescriptor`` "
    "(``flink_agents.integrations.mcp``): its tools and prompts become the agent's, by name."
)
