"""``AgentPlan``: an agent compiled into a serializable description.

The plan is what the runtime executes: actions indexed by the event types they
listen to, and resource specs from which each operator builds its resources.
It serializes to JSON (``to_json``/``from_json``) unchanged; the compiled
plans of the project's jobs are kept under ``plans/`` and a test keeps them
current.

Secrets (``flink_agents.api.redaction``): the JSON form, and every other
serialized form, writes ``***`` for secret descriptor arguments and action
config values; the plan object, and so the pickled plan a Flink job ships to
its workers, keeps the real values. A plan read back from such JSON holds
``***`` and cannot build those resources (the runtime refuses, naming the
argument); a secret given as ``secret_from_env("NAME")`` stays a reference
in every form and is read where the resource is built.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Dict, List

from pydantic import BaseModel, Field, PrivateAttr, SerializationInfo, field_serializer

from flink_agents.api.redaction import KEEP_SECRETS, redact, redacted_for_serialization
from flink_agents.api.resource import ResourceDescriptor, ResourceType
from flink_agents.api.trigger_conditions import ConditionEvaluationError, compile_condition
from flink_agents.plan.function_ref import FunctionRef

__all__ = ["ActionSpec", "AgentPlan", "ResourceKind", "ResourceSpec", "PLAN_SCHEMA_VERSION", "INJECTED_ARGS_TOOL_KEY"]

PLAN_SCHEMA_VERSION = 1


class ActionSpec(BaseModel):
    """One action: its function, what triggers it, its config.

    Attributes:
        listen_event_types: Exact event types that trigger it.
        trigger_conditions: Condition expressions (Flink Agents HEAD,
            ``api.trigger_conditions``) that trigger it on any other event
            for which one of them holds; in the JSON form only when present,
            so plans without expressions read and write as before.
    """

    name: str
    listen_event_types: List[str]
    function: FunctionRef
    config: Dict[str, Any] = Field(default_factory=dict)
    builtin: bool = False
    trigger_conditions: List[str] = Field(default_factory=list, exclude_if=lambda value: not value)

    @field_serializer("config")
    def _redacted_config(self, config: Dict[str, Any], info: SerializationInfo) -> Dict[str, Any]:
        return redacted_for_serialization(config, info.context)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, redact(value) if name == "config" else value


class ResourceKind(str, Enum):
    """How a resource is built where the agent runs."""

    DESCRIPTOR = "descriptor"  # ResourceDescriptor: class + constructor arguments
    PROMPT = "prompt"  # a Prompt's fields
    FUNCTION_TOOL = "function_tool"  # a function wrapped as a FunctionTool (value: its metadata)
    SERIALIZED = "serialized"  # another SerializableResource's fields + its class
    AGENT = "agent"  # a sub-agent: ``child`` names its plan in the root's ``children``


# In a FUNCTION_TOOL's ``value``, beside its metadata, only when set:
# the tool's results reach models as untrusted data (``@tool(untrusted=True)``).
UNTRUSTED_TOOL_KEY = "untrusted"
# ... and each call waits for a reviewer's approval (``@tool(needs_approval=True)``).
NEEDS_APPROVAL_TOOL_KEY = "needs_approval"
# ... and these parameters are filled at call time (``@tool(injected_args=...)``):
# {parameter: {"source": ..., "key": ...}}.
INJECTED_ARGS_TOOL_KEY = "injected_args"


class ResourceSpec(BaseModel):
    """One resource of the plan."""

    name: str
    type: ResourceType
    kind: ResourceKind
    descriptor: ResourceDescriptor | None = None
    function: FunctionRef | None = None
    value: Dict[str, Any] | None = None
    child: str | None = None


class AgentPlan(BaseModel):
    """A compiled agent. Build it with ``AgentPlan.from_agent(agent)``."""

    schema_version: int = PLAN_SCHEMA_VERSION
    agent: str
    actions: Dict[str, ActionSpec]
    actions_by_event: Dict[str, List[str]]
    resources: Dict[ResourceType, Dict[str, ResourceSpec]] = Field(default_factory=dict)
    # Sub-agent plans of the whole tree, once each, keyed by the name that
    # AGENT resources refer to (only the root plan holds them).
    children: Dict[str, "AgentPlan"] = Field(default_factory=dict)
    # Event classes the actions listen to (not in the JSON): with the action
    # functions, they travel to Flink workers inside the pickled plan, where
    # classes of the job's main script are registered for the codec.
    _event_classes: List[type] = PrivateAttr(default_factory=list)
    _has_expressions: bool | None = PrivateAttr(default=None)  # cache of has_condition_expressions
    _listeners: Dict[str, List[ActionSpec]] = PrivateAttr(default_factory=dict)  # cache of actions_for

    def __eq__(self, other: object) -> bool:
        # The fields are the identity; the kept classes are a cache (a plan
        # read back from JSON has none).
        if not isinstance(other, AgentPlan):
            return NotImplemented
        keep = KEEP_SECRETS
        return self.model_dump(context=keep) == other.model_dump(context=keep)

    __hash__ = None  # type: ignore[assignment]

    @property
    def event_classes(self) -> List[type]:
        """The event classes actions listen to, where the plan was compiled
        (empty for a plan read from JSON)."""
        return list(self._event_classes)

    @staticmethod
    def from_agent(agent: Any) -> "AgentPlan":
        """Compile ``agent``.

        Raises:
            PlanError: An action has a wrong signature, a resource is named
                twice or refers to an unknown resource, or a resource cannot
                be serialized. The message names the offender.
        """
        from flink_agents.plan.compiler import compile_agent

        return compile_agent(agent)

    def to_json(self) -> str:
        """The plan as indented, key-sorted JSON (stable for snapshots),
        secrets written as ``***`` (see the module docstring)."""
        import json

        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"

    @staticmethod
    def from_json(text: str) -> "AgentPlan":
        """Read a plan written by ``to_json``.

        Raises:
            PlanError: The plan's schema version is not supported.
        """
        import json

        from flink_agents.plan.errors import PlanError

        data = json.loads(text)
        if data.get("schema_version") != PLAN_SCHEMA_VERSION:
            raise PlanError(
                f"plan schema version {data.get('schema_version')!r} is not supported "
                f"(this release reads {PLAN_SCHEMA_VERSION})"
            )
        return AgentPlan.model_validate(data)

    def actions_for(self, event_type: str) -> List[ActionSpec]:
        """Actions listening to ``event_type`` exactly, in plan order (a
        list kept per type, asked for per event: do not change it)."""
        # The private slot directly, as has_condition_expressions reads it.
        private = self.__pydantic_private__
        listeners = private.get("_listeners")
        if listeners is None:  # a plan unpickled from a release without the cache
            listeners = private["_listeners"] = {}
        found = listeners.get(event_type)
        if found is None:
            if len(listeners) >= 4096:  # event types are few in practice; bound them anyway
                listeners.clear()
            found = listeners[event_type] = [self.actions[n] for n in self.actions_by_event.get(event_type, ())]
        return found

    @property
    def has_condition_expressions(self) -> bool:
        """Whether an action has a condition expression (then events are
        matched with ``actions_matching``)."""
        # Read per event: the private slot directly, not through pydantic's
        # ``__getattr__`` (which costs more than the rest of this check).
        private = self.__pydantic_private__
        cached = private.get("_has_expressions")
        if cached is None:
            cached = private["_has_expressions"] = any(spec.trigger_conditions for spec in self.actions.values())
        return cached

    def actions_matching(
        self, event_type: str, variables: Callable[[], Dict[str, Any]],
        on_failure: Callable[[ActionSpec, str, Exception], None],
    ) -> List[ActionSpec]:
        """Actions an event triggers, in plan order, as Flink Agents HEAD
        selects them: every action listening to ``event_type`` exactly; then
        each other action with condition expressions, whose expressions are
        evaluated in declaration order up to the first that holds. Each
        action runs at most once per event.

        Args:
            event_type: The event's type.
            variables: Builds the expression variables
                (``trigger_conditions.event_variables``), called at most once.
            on_failure: Called with (action, condition, error) when an
                expression fails on this event; if it returns, the condition
                counts as false and the next one is tried (``WARN_AND_SKIP``);
                it raises to fail the record (``FAIL``).
        """
        exact = set(self.actions_by_event.get(event_type, ()))
        built: List[Dict[str, Any]] = []
        chosen: List[ActionSpec] = []
        for name, spec in self.actions.items():
            if name in exact:
                chosen.append(spec)
                continue
            for text in spec.trigger_conditions:
                if not built:
                    built.append(variables())
                try:
                    if compile_condition(text).matches(built[0]):
                        chosen.append(spec)
                        break
                except ConditionEvaluationError as exc:
                    on_failure(spec, text, exc)
        return chosen

    def has_resource(self, name: str, type: ResourceType) -> bool:
        """Whether the plan has resource ``name`` of kind ``type``."""
        return name in self.resources.get(ResourceType(type), {})

    def resource_spec(self, name: str, type: ResourceType) -> ResourceSpec:
        """The spec of resource ``name`` of kind ``type``.

        Raises:
            KeyError: No such resource (the message lists the known names).
        """
        by_name = self.resources.get(ResourceType(type), {})
        if name not in by_name:
            raise KeyError(
                f"{self.agent} has no {ResourceType(type).value} resource {name!r} "
                f"(known: {sorted(by_name)})"
            )
        return by_name[name]
