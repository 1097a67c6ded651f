"""Compile an ``Agent`` into an ``AgentPlan``, validating it on the way."""

from __future__ import annotations

import inspect
import logging
import warnings
from typing import Any, Callable, Dict, Iterator, List, Tuple

from pydantic import BaseModel, ValidationError

from flink_agents._suggest import did_you_mean
from flink_agents.api.agents.agent import Agent
from flink_agents.api.callbacks import BUILTIN_CALLBACK_TOOLS
from flink_agents.api.decorators import ACTION_ATTR, ACTION_CONFIG_ATTR, ACTION_TARGET_ATTR, RESOURCE_ATTR
from flink_agents.api.events.chat_event import ChatRequestEvent
from flink_agents.api.events.context_retrieval_event import ContextRetrievalRequestEvent
from flink_agents.api.events.event import Event, InputEvent
from flink_agents.api.events.tool_event import ToolRequestEvent, ToolResponseEvent
from flink_agents.api.function import Function, PythonFunction
from flink_agents.api.prompts.prompt import LocalPrompt
from flink_agents.api.redaction import is_secret_reference, redact, redact_text
from flink_agents.api.resource import ResourceDescriptor, ResourceType, SerializableResource
from flink_agents.api.tools.tool import FunctionTool
from flink_agents.plan.agent_plan import (
    INJECTED_ARGS_TOOL_KEY, NEEDS_APPROVAL_TOOL_KEY, UNTRUSTED_TOOL_KEY, ActionSpec, AgentPlan, ResourceKind, ResourceSpec,
)
from flink_agents.plan.errors import PlanError
from flink_agents.plan.function_ref import FunctionRef
from flink_agents.plan.no_java import check_action_function, check_resource
from flink_agents.plan.skills import add_skills
from flink_agents.api.trigger_conditions import TriggerConditionError, classify, compile_condition

__all__ = ["compile_agent"]

log = logging.getLogger(__name__)

# Built-in actions: name -> (module, function, event types). Named, not
# imported: the plan layer does not depend on the runtime.
# How to make a name a setup refers to known: 0.3.1's registration calls.
_REGISTER_HINT = {
    "tools": "register it as a tool: a @tool method of the agent, or "
             "env.add_resource(name, ResourceType.TOOL, Tool.from_callable(fn))",
    "prompt": "register it as a prompt: a @prompt method of the agent, or "
              "env.add_resource(name, ResourceType.PROMPT, Prompt.from_text(...))",
}

_BUILTIN_ACTIONS: Dict[str, Tuple[str, str, List[str]]] = {
    "_chat_model_action": (
        "flink_agents.runtime.builtin_actions",
        "chat_model_action",
        [ChatRequestEvent.EVENT_TYPE, ToolResponseEvent.EVENT_TYPE],
    ),
    "_tool_call_action": ("flink_agents.runtime.builtin_actions", "tool_call_action", [ToolRequestEvent.EVENT_TYPE]),
    "_context_retrieval_action": (
        "flink_agents.runtime.features.retrieval",
        "context_retrieval_action",
        [ContextRetrievalRequestEvent.EVENT_TYPE],
    ),
}


class _Tree:
    """Compiles a root agent and its sub-agents: each distinct child instance
    once, cycles (by agent class) rejected with their path."""

    MAX_DEPTH = 32

    def __init__(self) -> None:
        self.children: Dict[str, AgentPlan] = {}
        self._keys: Dict[int, str] = {}
        self._path: List[Agent] = []

    def _names(self, agents: List[Agent]) -> str:
        return " -> ".join(type(a).__qualname__ for a in agents)

    def compile(self, agent: Agent) -> AgentPlan:
        if not isinstance(agent, Agent):
            raise PlanError(f"expected an Agent instance, got {type(agent).__name__}")
        on_path = [i for i, a in enumerate(self._path) if a is agent]
        if on_path:
            raise PlanError("sub-agents form a cycle: " + self._names(self._path[on_path[0]:] + [agent]))
        if len(self._path) >= self.MAX_DEPTH:
            # New instances all the way down (a class that builds its own
            # ancestor in __init__): a cycle by class.
            raise PlanError(
                f"sub-agents nest deeper than {self.MAX_DEPTH} (a cycle by class?): "
                + self._names(self._path[-6:] + [agent])
            )
        self._path.append(agent)
        try:
            return _compile_one(agent, self)
        finally:
            self._path.pop()

    def child(self, agent: Any, where: str) -> str:
        """The key of ``agent``'s plan in ``children``, compiling it once."""
        if not isinstance(agent, Agent):
            raise PlanError(f"{where} is a {type(agent).__name__}; an AGENT resource must be an Agent instance")
        key = self._keys.get(id(agent))
        if key is None:
            plan = self.compile(agent)
            key = type(agent).__qualname__
            suffix = 2
            while key in self.children:
                key, suffix = f"{type(agent).__qualname__}#{suffix}", suffix + 1
            self._keys[id(agent)] = key
            self.children[key] = plan
        return key


def compile_agent(agent: Agent) -> AgentPlan:
    """See ``AgentPlan.from_agent``."""
    tree = _Tree()
    root = tree.compile(agent)
    root.children = dict(sorted(tree.children.items()))
    return root


def _compile_one(agent: Agent, tree: _Tree) -> AgentPlan:
    agent_name = type(agent).__qualname__
    actions = _collect_actions(agent, agent_name)
    resources = _collect_resources(agent, agent_name, tree)
    add_skills(resources, agent_name)  # merged Skills + the load_skill tool
    _check_references(resources, agent_name)

    by_event: Dict[str, List[str]] = {}
    for spec in actions.values():
        for event_type in spec.listen_event_types:
            by_event.setdefault(event_type, []).append(spec.name)
    if InputEvent.EVENT_TYPE not in by_event:
        log.warning(
            "no action of %s listens to InputEvent (%s): its runs will do nothing",
            agent_name, InputEvent.EVENT_TYPE,
        )
    plan = AgentPlan(
        agent=f"{type(agent).__module__}.{agent_name}",
        actions=actions,
        actions_by_event=by_event,
        resources=resources,
    )
    plan._event_classes = _listened_classes(agent)
    return plan


def _listened_classes(agent: Agent) -> List[type]:
    """The event classes (not type strings) the agent's actions listen to."""
    listened = [ev for _, fn in _decorated(agent, ACTION_ATTR) for ev in getattr(fn, ACTION_ATTR)]
    listened += [ev for events, _, _ in agent.actions.values() for ev in events]
    return list(dict.fromkeys(ev for ev in listened if isinstance(ev, type)))


def _decorated(agent: Agent, attr: str) -> Iterator[Tuple[str, Callable[..., Any]]]:
    """Functions of the agent's class (and bases) carrying marker ``attr``."""
    seen: set[str] = set()
    for cls in type(agent).__mro__:
        for name, member in vars(cls).items():
            fn = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
            if name in seen or not callable(fn) or not hasattr(fn, attr):
                continue
            seen.add(name)
            yield name, fn


def _check_action_signature(name: str, fn: Callable[..., Any], agent_name: str) -> None:
    if not callable(fn):
        raise PlanError(f"action {name!r} of {agent_name} is not callable")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise PlanError(f"action {name!r} of {agent_name} has no inspectable signature") from exc
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required_other = [
        p for p in params
        if p.kind == p.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    ]
    if len(positional) != 2 or required_other or positional[0].name == "self":
        shown = ", ".join(p.name for p in params)
        raise PlanError(
            f"action {name!r} of {agent_name} must take (event, ctx); it takes ({shown})"
            + (" - declare it as @staticmethod" if positional and positional[0].name == "self" else "")
        )


def _warn_if_annotated_to_return(name: str, fn: Callable[..., Any], agent_name: str) -> None:
    """Warn at plan time about an action annotated to return a value: the
    runtime fails an action that returns one (events go through
    ``ctx.send_event``)."""
    returns = inspect.signature(fn).return_annotation
    if returns in (inspect.Signature.empty, None, type(None), "None", "Any", Any):
        return
    shown = returns if isinstance(returns, str) else getattr(returns, "__name__", repr(returns))
    warnings.warn(
        f"action {name!r} of {agent_name} is annotated to return {shown}; an action returns "
        "nothing (a returned value fails it): use ctx.send_event to send events",
        stacklevel=4,
    )


def _action_callable(name: str, fn: Any, agent_name: str) -> Callable[..., Any]:
    """What action ``name`` runs: its ``@action(target=...)`` if it has
    one, a ``PythonFunction`` resolved to its function; a ``JavaFunction``
    is refused (``no_java``).

    Raises:
        PlanError: A Java function, or a Python one that cannot be imported.
    """
    fn = getattr(fn, ACTION_TARGET_ATTR, None) or fn
    check_action_function(f"action {name!r} of {agent_name}", fn)
    if isinstance(fn, PythonFunction):
        try:
            return fn.as_callable()
        except (ImportError, AttributeError, TypeError) as exc:
            raise PlanError(
                f"action {name!r} of {agent_name}: cannot resolve {fn.module}:{fn.qualname}: {exc}"
            ) from exc
    if isinstance(fn, Function):
        raise PlanError(f"action {name!r} of {agent_name} is a {type(fn).__name__}, which this runtime cannot run")
    return fn


def _split_conditions(name: str, entries: List[Any], agent_name: str) -> Tuple[List[str], List[str]]:
    """An action's trigger entries as (exact event types, checked condition
    expressions), each in declaration order (``api.trigger_conditions``)."""
    event_types: List[str] = []
    expressions: List[str] = []
    for entry in entries:
        if isinstance(entry, type) and issubclass(entry, Event):
            event_types.append(entry.EVENT_TYPE)
            continue
        if not isinstance(entry, str):
            raise PlanError(
                f"action {name!r} of {agent_name} listens to {entry!r}; "
                "expected an Event class, an EVENT_TYPE string or a condition expression"
            )
        try:
            kind, text = classify(entry)
            if kind == "expression":
                compile_condition(text)
        except TriggerConditionError as exc:
            raise PlanError(f"action {name!r} of {agent_name}: trigger condition {entry!r}: {exc}") from None
        (event_types if kind == "event_type" else expressions).append(text)
    return event_types, expressions


def _collect_actions(agent: Agent, agent_name: str) -> Dict[str, ActionSpec]:
    actions: Dict[str, ActionSpec] = {}
    entries: List[Tuple[str, List[Any], Callable[..., Any], Dict[str, Any]]] = [
        (name, list(getattr(fn, ACTION_ATTR)), fn, dict(getattr(fn, ACTION_CONFIG_ATTR, {})))
        for name, fn in _decorated(agent, ACTION_ATTR)
    ]
    entries += [(name, evs, fn, cfg or {}) for name, (evs, fn, cfg) in agent.actions.items()]
    for name, events, fn, config in entries:
        if name in actions or name in _BUILTIN_ACTIONS:
            raise PlanError(f"action {name!r} of {agent_name} is defined twice")
        fn = _action_callable(name, fn, agent_name)
        _check_action_signature(name, fn, agent_name)
        _warn_if_annotated_to_return(name, fn, agent_name)
        if not events:
            raise PlanError(f"action {name!r} of {agent_name} listens to no event")
        event_types, expressions = _split_conditions(name, events, agent_name)
        actions[name] = ActionSpec(
            name=name,
            listen_event_types=event_types,
            function=FunctionRef.of(fn),
            config=config,
            trigger_conditions=expressions,
        )
    for name, (module, fn_name, event_types) in _BUILTIN_ACTIONS.items():
        actions[name] = ActionSpec(
            name=name,
            listen_event_types=event_types,
            function=FunctionRef(module=module, qualname=fn_name, is_async=True),
            builtin=True,
        )
    return actions


def _resource_spec(name: str, type: ResourceType, value: Any, agent_name: str, tree: _Tree) -> ResourceSpec:
    where = f"{type.value} resource {name!r} of {agent_name}"
    check_resource(where, value)
    if type == ResourceType.AGENT:
        return ResourceSpec(name=name, type=type, kind=ResourceKind.AGENT, child=tree.child(value, where))
    if isinstance(value, ResourceDescriptor):
        return ResourceSpec(name=name, type=type, kind=ResourceKind.DESCRIPTOR, descriptor=value)
    if isinstance(value, LocalPrompt):
        # Another Prompt subclass is a SerializableResource: class + fields.
        return ResourceSpec(
            name=name, type=type, kind=ResourceKind.PROMPT, value=value.model_dump(mode="json")
        )
    # As the function is marked (@tool(untrusted=True, needs_approval=True)).
    untrusted = needs_approval = injected = None
    if isinstance(value, FunctionTool):
        value, untrusted, needs_approval, injected = value.func, value.untrusted, value.needs_approval, value.injected_args
    if type == ResourceType.TOOL and callable(value) and not isinstance(value, BaseModel):
        try:
            tool = FunctionTool.from_callable(
                value, name=name, untrusted=untrusted, needs_approval=needs_approval, injected_args=injected,
            )
        except ValueError as exc:  # injected_args naming no parameter, or in conflict
            raise PlanError(f"{where}: {exc}") from None
        described = tool.metadata.model_dump(mode="json")
        if tool.untrusted:  # only then: plans of unmarked tools stay as they were
            described[UNTRUSTED_TOOL_KEY] = True
        if tool.needs_approval:  # likewise
            described[NEEDS_APPROVAL_TOOL_KEY] = True
        if tool.injected_args:  # likewise
            described[INJECTED_ARGS_TOOL_KEY] = {
                param: spec.model_dump(mode="json") for param, spec in tool.injected_args.items()
            }
        return ResourceSpec(
            name=name,
            type=type,
            kind=ResourceKind.FUNCTION_TOOL,
            function=FunctionRef.of(value),
            value=described,
        )
    if isinstance(value, SerializableResource):
        descriptor = ResourceDescriptor(clazz=value.__class__, arguments=value.model_dump(mode="json"))
        return ResourceSpec(name=name, type=type, kind=ResourceKind.SERIALIZED, descriptor=descriptor)
    raise PlanError(
        f"{where} is a {value.__class__.__name__}; expected a ResourceDescriptor, "
        "a Prompt, a SerializableResource, or a function (for a tool)"
    )


def _collect_resources(agent: Agent, agent_name: str, tree: _Tree) -> Dict[ResourceType, Dict[str, ResourceSpec]]:
    resources: Dict[ResourceType, Dict[str, ResourceSpec]] = {}

    def add(name: str, type: ResourceType, value: Any) -> None:
        by_name = resources.setdefault(type, {})
        if name in by_name:
            raise PlanError(f"{type.value} resource {name!r} of {agent_name} is defined twice")
        by_name[name] = _resource_spec(name, type, value, agent_name, tree)

    for name, fn in _decorated(agent, RESOURCE_ATTR):
        type = getattr(fn, RESOURCE_ATTR)
        if type == ResourceType.TOOL:
            add(name, type, fn)
            continue
        try:
            value = fn()
        except Exception as exc:
            raise PlanError(
                f"{type.value} resource {name!r} of {agent_name} raised while building: {redact_text(repr(exc))}"
            ) from exc
        add(name, type, value)
    for type, by_name in agent.resources.items():
        for name, value in by_name.items():
            add(name, type, value)
    return resources


def _check_references(resources: Dict[ResourceType, Dict[str, ResourceSpec]], agent_name: str) -> None:
    """A chat model setup's prompt and tools (when named) must exist.

    When the agent declares MCP servers, a name no local resource has is
    accepted here: it may be one of the servers' tools or prompts, which are
    listed only on the worker at first use (the client compiling the plan
    may not reach the servers); a name no server offers fails there, with an
    error listing what each server offers.

    Its connection is not checked here: as in Flink Agents 0.3.1, a setup
    that overrides ``chat`` may never use one, so a connection that names
    no resource fails only when the setup first uses it (a ``KeyError``
    naming the setup and the connection, from the resource context).
    """
    wanted = {
        "prompt": ResourceType.PROMPT,
        "tools": ResourceType.TOOL,
    }
    for name, spec in resources.get(ResourceType.CHAT_MODEL, {}).items():
        if spec.descriptor is None:
            continue
        _check_setup_fields(name, spec, agent_name)
        for arg, target_type in wanted.items():
            refs = spec.descriptor.arguments.get(arg)
            if refs is None or (arg == "prompt" and not isinstance(refs, str)):
                continue
            for ref in refs if isinstance(refs, list) else [refs]:
                known = resources.get(target_type, {})
                if arg == "tools" and ref in BUILTIN_CALLBACK_TOOLS and ref not in known:
                    continue  # a built-in tool (flink_agents.api.callbacks)
                if ref not in known and resources.get(ResourceType.MCP_SERVER):
                    continue  # maybe an MCP server's tool or prompt: checked at first use
                if ref not in known:
                    raise PlanError(
                        f"chat model setup {name!r} of {agent_name} refers to {arg} {ref!r}, "
                        f"which is not a {target_type.value} resource (known: {sorted(known)})"
                        f"{did_you_mean(ref, known)}; {_REGISTER_HINT[arg]}"
                    )


def _check_setup_fields(name: str, spec: ResourceSpec, agent_name: str) -> None:
    """Validate a chat model setup's own settings (e.g. conversation bounds)
    now, not when its first record runs: a job would otherwise be submitted
    and fail, or skip every record, on a typo.

    Raises:
        PlanError: A field the setup class declares has an invalid value.
    """
    assert spec.descriptor is not None
    cls = spec.descriptor.clazz
    fields = getattr(cls, "model_fields", None)
    if not isinstance(cls, type) or not issubclass(cls, BaseModel) or fields is None:
        return
    given = {
        k: v for k, v in spec.descriptor.arguments.items()
        if k in fields and k != "connection" and not is_secret_reference(v)  # references: read on the worker
    }
    for field, value in given.items():
        try:
            cls.__pydantic_validator__.validate_assignment(cls.model_construct(), field, value)
        except ValidationError as exc:
            raise PlanError(
                f"chat model setup {name!r} of {agent_name}: {exc.errors()[0]['msg']} ({field}={redact(value, field)!r})"
            ) from None
