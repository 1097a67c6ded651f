"""Load YAML agent files: agents, actions, prompts, tools and resources
declared in YAML and bound to Python functions, as Flink Agents 0.3.1's
``flink_agents.api.yaml.loader`` does.

``load_yaml(env, paths)`` registers each file's agents on the environment
(``env.from_list(...).apply("agent_name")``) and its file-level resources
with ``env.add_resource``; ``build_agents(path)`` builds one file's agents
without an environment. The format is ``flink_agents.api.yaml.specs``.

Every error is a ``YamlAgentError`` whose message starts with the file, the
line and the key, e.g.
``agents.yaml:12: agents[0].actions[0].function: module 'x' has no attribute 'y'``.
Functions and classes are imported at load time, so a typo fails here and
not when the first record runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence, Tuple

from pydantic import BaseModel

from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.function import PythonFunction
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import Resource, ResourceDescriptor, ResourceType
from flink_agents.api.skills import SkillSourceSpec, Skills
from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.trigger_conditions import TriggerConditionError, classify, compile_condition
from flink_agents.api.yaml._functions import resolve_callable
from flink_agents.api.yaml._source import Loc, Source, YamlAgentError, parse, validate
from flink_agents.api.yaml.aliases import CLAZZ_ALIASES, AliasNotAvailable, is_alias, resolve_clazz, resolve_event_type
from flink_agents.api.yaml.specs import (
    DESCRIPTOR_SECTIONS,
    ActionSpec,
    AgentSpec,
    DescriptorSpec,
    PromptSpec,
    SkillsSpec,
    ToolSpec,
)

if TYPE_CHECKING:
    from flink_agents.api.execution_environment import AgentsExecutionEnvironment

__all__ = ["YamlAgentError", "build_agents", "load_yaml", "resolve_function"]

PathLike = str | os.PathLike

_SECTION_TYPES: Dict[str, ResourceType] = {
    "chat_model_connections": ResourceType.CHAT_MODEL_CONNECTION,
    "chat_model_setups": ResourceType.CHAT_MODEL,
    "embedding_model_connections": ResourceType.EMBEDDING_MODEL_CONNECTION,
    "embedding_model_setups": ResourceType.EMBEDDING_MODEL,
    "vector_stores": ResourceType.VECTOR_STORE,
    "mcp_servers": ResourceType.MCP_SERVER,
}


def resolve_function(
    *,
    name: str,
    function: str | None,
    language: str | None = None,
    parameter_types: List[str] | None = None,
) -> PythonFunction:
    """The ``PythonFunction`` a YAML ``function:`` reference names, with
    0.3.1's signature. ``function`` is ``module:qualname`` (0.3.1's form) or a
    dotted path; unlike 0.3.1, the function is imported here, so a bad
    reference fails now.

    Args:
        name: The action's or tool's name (for messages).
        function: The reference.
        language: ``"python"`` or None; ``"java"`` is refused (no JVM bridge).
        parameter_types: Java only; must be None.

    Raises:
        ValueError: No reference, a malformed or unresolvable one, or a Java
            function; the message names ``name`` and says which.
    """
    if language == "java" or parameter_types is not None:
        raise ValueError(f"{name!r}: Java functions are not supported: this runtime has no JVM bridge")
    if function is None:
        raise ValueError(f"{name!r}: 'function' is required ('module:qualname')")
    try:
        _, module, qualname = resolve_callable(function)
    except ValueError as exc:
        raise ValueError(f"{name!r}: {exc}") from None
    return PythonFunction(module=module, qualname=qualname)


class _Builder:
    """Builds one file's agents and shared resources from its specs."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def function(self, reference: str | None, loc: Loc, language: str | None) -> Callable[..., Any]:
        self.python_only(language, loc)
        if reference is None:
            raise self.source.error(loc + ("function",), "missing required key")
        try:
            return resolve_callable(reference)[0]
        except ValueError as exc:
            raise self.source.error(loc + ("function",), str(exc)) from None

    def python_only(self, language: str | None, loc: Loc) -> None:
        if language == "java":
            raise self.source.error(
                loc + ("type",),
                "'java' is not supported: this runtime runs Python actions, tools and resources only "
                "(Flink Agents 0.3.1 reaches Java ones through its JVM operator)",
            )

    def descriptor(self, spec: DescriptorSpec, resource_type: ResourceType, loc: Loc) -> ResourceDescriptor:
        self.python_only(spec.type, loc)
        class_name = resolve_clazz(spec.clazz, resource_type)
        if "." not in class_name:
            known = ", ".join(sorted(CLAZZ_ALIASES.get(resource_type, {}).get("python", {}))) or "none"
            raise self.source.error(
                loc + ("clazz",),
                f"unknown {resource_type.value} alias {spec.clazz!r} (aliases: {known}); "
                "or write a fully qualified class name 'pkg.module.Class'",
            )
        arguments = dict(spec.model_extra or {})
        descriptor = ResourceDescriptor(clazz=class_name, arguments=arguments)
        try:
            cls = descriptor.clazz
        except Exception as exc:
            raise self.source.error(loc + ("clazz",), self.import_problem(spec.clazz, class_name, resource_type, exc)) from None
        self.check_class(cls, class_name, resource_type, arguments, loc)
        return descriptor

    @staticmethod
    def import_problem(given: str, class_name: str, resource_type: ResourceType, exc: Exception) -> str:
        """Why ``class_name`` did not import: for an alias whose class is
        missing from this package, that the provider is not shipped yet."""
        if not is_alias(given, resource_type):
            return f"cannot import class {class_name!r}: {exc}"
        missing = getattr(exc, "name", None) or ""
        if isinstance(exc, AttributeError) or missing.startswith("flink_agents"):
            return (
                f"{resource_type.value} alias {given!r} stands for {class_name}, which is not available yet: "
                "this release does not ship that provider; write a fully qualified class name instead"
            )
        return f"{resource_type.value} alias {given!r} stands for {class_name}, which cannot be imported: {exc}"

    def check_class(
        self, cls: Any, class_name: str, resource_type: ResourceType, arguments: Dict[str, Any], loc: Loc
    ) -> None:
        """The class is a resource of the section's kind, and every extra key
        is one of its settings (a pydantic model that refuses nothing would
        otherwise drop a misspelt key silently)."""
        if not isinstance(cls, type):
            raise self.source.error(loc + ("clazz",), f"{class_name!r} is not a class")
        if issubclass(cls, Resource):
            kind = cls.resource_type()
            if kind != resource_type:
                raise self.source.error(
                    loc + ("clazz",), f"{cls.__name__} is a {kind.value} resource, not a {resource_type.value}"
                )
        if issubclass(cls, BaseModel) and cls.model_config.get("extra") != "allow":
            settings = {name for name, info in cls.model_fields.items() if not info.exclude}
            settings |= {info.alias for info in cls.model_fields.values() if info.alias}
            for key in arguments:
                if key not in settings:
                    raise self.source.error(
                        loc + (key,),
                        f"unknown key for {cls.__name__} (its settings: {', '.join(sorted(settings))})",
                    )

    def tool(self, spec: ToolSpec, loc: Loc) -> Any:
        self.python_only(spec.type, loc)
        if spec.parameter_types is not None:
            raise self.source.error(loc + ("parameter_types",), "only Java tools declare parameter_types")
        function = self.function(spec.function, loc, spec.type)
        if not spec.injected_args:
            return function
        try:
            return FunctionTool.from_callable(function, name=spec.name, injected_args=spec.injected_args)
        except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise self.source.error(loc + ("injected_args",), str(exc)) from None

    @staticmethod
    def prompt(spec: PromptSpec) -> Prompt:
        if spec.text:
            return Prompt.from_text(spec.text)
        return Prompt.from_messages(
            [ChatMessage(role=message.role, content=message.content) for message in spec.messages or []]
        )

    def skills(self, spec: SkillsSpec, loc: Loc) -> Skills:
        sources = [SkillSourceSpec(scheme="local", params={"path": p}) for p in spec.paths]
        sources += [SkillSourceSpec(scheme="url", params={"url": u}) for u in spec.urls]
        sources += [SkillSourceSpec(scheme="classpath", params={"resource": r}) for r in spec.classpath]
        sources += [
            SkillSourceSpec(scheme="package", params={"package": p.package, "resource": p.resource})
            for p in spec.package
        ]
        return Skills(sources=sources)

    def resources(self, owner: Any, loc: Loc) -> List[Tuple[str, ResourceType, Any, Loc]]:
        """``(name, type, resource, loc)`` of every resource section of
        ``owner`` (an agent spec or the document); a name repeated within a
        section is an error at its second entry."""
        built: List[Tuple[str, ResourceType, Any, Loc]] = []

        def add(section: str, resource_type: ResourceType, specs: Sequence[Any], make: Callable[[Any, Loc], Any]) -> None:
            seen: Dict[str, int] = {}
            for index, spec in enumerate(specs):
                where = loc + (section, index)
                if spec.name in seen:
                    raise self.source.error(
                        where + ("name",), f"duplicate {section[:-1]} name {spec.name!r} (first at line {seen[spec.name]})"
                    )
                seen[spec.name] = self.source.line(where + ("name",))
                built.append((spec.name, resource_type, make(spec, where), where))

        for section in DESCRIPTOR_SECTIONS:
            resource_type = _SECTION_TYPES[section]
            add(section, resource_type, getattr(owner, section),
                lambda spec, where, t=resource_type: self.descriptor(spec, t, where))
        add("tools", ResourceType.TOOL, owner.tools, self.tool)
        add("prompts", ResourceType.PROMPT, owner.prompts, lambda spec, where: self.prompt(spec))
        add("skills", ResourceType.SKILLS, owner.skills, self.skills)
        return built

    def action(self, agent: Agent, spec: ActionSpec, loc: Loc) -> None:
        function = self.function(spec.function, loc, spec.type)
        events: List[str] = []
        for index, name in enumerate(spec.triggers):
            try:
                events.append(resolve_event_type(name))
                kind, text = classify(events[-1])
                if kind == "expression":
                    compile_condition(text)
            except (AliasNotAvailable, TriggerConditionError) as exc:
                raise self.source.error(loc + (spec.triggers_field, index), str(exc)) from None
        if spec.name in agent.actions:
            raise self.source.error(loc + ("name",), f"duplicate action name {spec.name!r} in this agent")
        agent.add_action(spec.name, events, function, **(spec.config or {}))

    def agent(self, spec: AgentSpec, loc: Loc, shared_actions: Dict[str, Tuple[ActionSpec, Loc]]) -> Agent:
        # A class per YAML agent, so plans and errors name the agent
        # ("chat model setup 'm' of review_agent refers to ...").
        agent_class = type(spec.name, (Agent,), {"__module__": __name__, "__doc__": spec.description})
        agent = agent_class()
        for name, resource_type, resource, _ in self.resources(spec, loc):
            agent.add_resource(name, resource_type, resource)
        for index, item in enumerate(spec.actions):
            where = loc + ("actions", index)
            if isinstance(item, str):
                if item not in shared_actions:
                    known = ", ".join(sorted(shared_actions)) or "none"
                    raise self.source.error(
                        where, f"no shared action named {item!r} in this file (shared actions: {known})"
                    )
                shared, shared_loc = shared_actions[item]
                if shared.name in agent.actions:
                    raise self.source.error(where, f"duplicate action name {item!r} in this agent")
                self.action(agent, shared, shared_loc)
            else:
                self.action(agent, item, where)
        return agent


@dataclass
class _FileContents:
    agents: Dict[str, Tuple[Agent, Loc]]
    shared: List[Tuple[str, ResourceType, Any, Loc]]
    shared_actions: Dict[str, Tuple[ActionSpec, Loc]]
    source: Source


def _build_file(path: PathLike) -> _FileContents:
    source = parse(path)
    doc = validate(source)
    builder = _Builder(source)
    shared = builder.resources(doc, ())
    shared_actions: Dict[str, Tuple[ActionSpec, Loc]] = {}
    for index, action in enumerate(doc.actions):
        loc: Loc = ("actions", index)
        if action.name in shared_actions:
            first = source.line(shared_actions[action.name][1])
            raise source.error(loc + ("name",), f"duplicate shared action name {action.name!r} (first at line {first})")
        builder.function(action.function, loc, action.type)  # fail here even if no agent uses it
        shared_actions[action.name] = (action, loc)
    agents: Dict[str, Tuple[Agent, Loc]] = {}
    for index, spec in enumerate(doc.agents):
        loc = ("agents", index)
        if spec.name in agents:
            first = source.line(agents[spec.name][1])
            raise source.error(loc + ("name",), f"duplicate agent name {spec.name!r} (first at line {first})")
        agents[spec.name] = (builder.agent(spec, loc, shared_actions), loc)
    return _FileContents(agents, shared, shared_actions, source)


def build_agents(
    path: PathLike,
) -> Tuple[Dict[str, Agent], Dict[ResourceType, Dict[str, Any]], Dict[str, ActionSpec]]:
    """Build the agents one file declares, without an environment, as Flink
    Agents 0.3.1's ``build_agents`` does.

    Returns:
        ``(agents, shared_resources, shared_actions)``: agent name ->
        ``Agent``; resource type (every ``ResourceType``) -> name -> the
        file-level resources (descriptors, prompts, tool functions), which
        ``load_yaml`` registers on an environment; name -> the file-level
        ``ActionSpec``.

    Raises:
        YamlAgentError: The file is unreadable or invalid (file, line, key).
    """
    contents = _build_file(path)
    shared: Dict[ResourceType, Dict[str, Any]] = {t: {} for t in ResourceType}
    for name, resource_type, resource, _ in contents.shared:
        shared[resource_type][name] = resource
    agents = {name: agent for name, (agent, _) in contents.agents.items()}
    return agents, shared, {name: spec for name, (spec, _) in contents.shared_actions.items()}


def load_yaml(env: "AgentsExecutionEnvironment", paths: PathLike | Sequence[PathLike]) -> None:
    """Register the agents and file-level resources of YAML files on ``env``.

    Agents are then applied by name (``apply("review_agent")``); file-level
    resources are seen by every agent applied on ``env`` (an agent's own
    resource wins on a name clash), as in Flink Agents 0.3.1. Calls
    accumulate; a file is registered whole or not at all.

    Args:
        env: The execution environment.
        paths: One path or a list of paths.

    Raises:
        YamlAgentError: A file is unreadable or invalid, or one of its agent
            or shared resource names is already registered on ``env``; the
            message names the file, the line and the key.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    for path in paths:
        contents = _build_file(path)
        source = contents.source
        for name, (_, loc) in contents.agents.items():
            if name in env._agents:
                raise source.error(loc + ("name",), f"an agent named {name!r} is already registered on the environment")
        for name, resource_type, _, loc in contents.shared:
            if name in env.resources[resource_type]:
                raise source.error(
                    loc + ("name",),
                    f"a shared {resource_type.value} named {name!r} is already registered on the environment",
                )
        for name, resource_type, resource, _ in contents.shared:
            env.add_resource(name, resource_type, resource)
        for name, (agent, _) in contents.agents.items():
            env._agents[name] = agent
