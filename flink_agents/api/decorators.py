"""Decorators that declare an agent's actions and resources on its class.

Use them under ``@staticmethod``-style functions of an ``Agent`` subclass::

    class MyAgent(Agent):
        @action(InputEvent)
        @staticmethod
        def on_input(event: InputEvent, ctx: RunnerContext) -> None: ...
"""

from __future__ import annotations

from typing import Any, Callable, Dict

from flink_agents.api.events.event import Event
from flink_agents.api.resource import ResourceType

__all__ = [
    "action",
    "chat_model_connection",
    "chat_model_setup",
    "embedding_model_connection",
    "embedding_model_setup",
    "mcp_server",
    "prompt",
    "skills",
    "tool",
    "vector_store",
]

ACTION_ATTR = "_flink_agents_listen_events"
ACTION_CONFIG_ATTR = "_flink_agents_action_config"
RESOURCE_ATTR = "_flink_agents_resource_type"
TOOL_UNTRUSTED_ATTR = "_flink_agents_tool_untrusted"
TOOL_NEEDS_APPROVAL_ATTR = "_flink_agents_tool_needs_approval"
TOOL_INJECTED_ARGS_ATTR = "_flink_agents_tool_injected_args"


def _function_of(obj: Any) -> Callable[..., Any]:
    return obj.__func__ if isinstance(obj, staticmethod) else obj


def action(*trigger_conditions: type[Event] | str, **config: Any) -> Callable[[Any], Any]:
    """Mark a function as an action triggered by ``trigger_conditions``.

    Args:
        *trigger_conditions: Event classes, event-type strings
            (``EventType.InputEvent``, ``"my_event"``, quoted
            ``"'order:created'"``) or, as in Flink Agents HEAD, condition
            expressions (``"type == EventType.InputEvent && score > 5"``),
            combined with OR. A string is an event type when it is a bare
            (dotted) name or a quoted one, else an expression; expressions
            are checked when the plan is compiled
            (``flink_agents.api.trigger_conditions``).
        **config: Values the action reads through ``ctx.action_config``.

    Raises:
        TypeError: No condition given, or an entry is neither an Event class nor a str.
    """
    if not trigger_conditions:
        raise TypeError("@action needs at least one event type or trigger condition")
    for ev in trigger_conditions:
        if not (isinstance(ev, str) or (isinstance(ev, type) and issubclass(ev, Event))):
            raise TypeError(f"@action takes Event classes, event-type strings or condition expressions, not {ev!r}")
    listen_events = trigger_conditions

    def mark(fn: Any) -> Any:
        setattr(_function_of(fn), ACTION_ATTR, tuple(listen_events))
        setattr(_function_of(fn), ACTION_CONFIG_ATTR, dict(config))
        return fn

    return mark


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
