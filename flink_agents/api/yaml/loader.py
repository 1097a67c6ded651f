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

``type: java`` entries load as 0.3.1 loads them (a ``JavaFunction`` for an
action or a tool, a descriptor of the Python-side wrapper class with
``java_clazz`` for a resource); this runtime has no JVM, so compiling a plan
that uses one fails, naming it (docs/compatibility.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence, Tuple

from pydantic import BaseModel

from flink_agents._suggest import did_you_mean
from flink_agents.api.agents.agent import Agent
from flink_agents.api.chat_message import ChatMessage
from flink_agents.api.function import Function, JavaFunction, PythonFunction
from flink_agents.api.prompts.prompt import Prompt
from flink_agents.api.resource import Resource, ResourceDescriptor, ResourceType
from flink_agents.api.skills import SkillSourceSpec, Skills
from flink_agents.api.trigger_conditions import TriggerConditionError, classify, compile_condition
from flink_agents.api.yaml._functions import resolve_callable, split_reference
from flink_agents.api.yaml._source import Loc, Source, YamlAgentError, parse, validate
from flink_agents.api.tools.function_tool import FunctionTool
from flink_agents.api.yaml.aliases import (
    CLAZZ_ALIASES,
    AliasNotAvailable,
    JAVA_WRAPPER_CLAZZ,
    is_alias,
    resolve_clazz,
    resolve_event_type,
)
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


def _split_java(reference: str | None) -> Tuple[str, str]:
    """``(class, method)`` of a Java reference ``pkg.Class:method``."""
    qualname, _, method_name = (reference or "").rpartition(":")
    if not qualname or not method_name:
        raise ValueError(f"a Java 'function' is 'pkg.Class:method', got {reference!r}")
    return qualname, method_name


def _java_function(name: str, function: str | None, parameter_types: List[str] | None) -> JavaFunction:
    try:
        qualname, method_name = _split_java(function)
    except ValueError as exc:
        raise ValueError(f"{name!r}: {exc}") from None
    if parameter_types is None:
        raise ValueError(f"{name!r}: a Java tool needs 'parameter_types' (its method's Java parameter types)")
    return JavaFunction(qualname=qualname, method_name=method_name, parameter_types=list(parameter_types))


def resolve_function(
    *,
    name: str,
    function: str | None,
    language: str | None = None,
    parameter_types: List[str] | None = None,
) -> Function:
    """The function descriptor a YAML ``function:`` reference names, with
    0.3.1's signature.

    For Python (``language`` None or ``"python"``), a ``PythonFunction``:
    ``function`` is ``module:qualname`` (0.3.1's form), resolved when it is
    first called (``as_callable``), as in 0.3.1; or a dotted path, which is
    imported now to find where the module ends. (``build_agents`` and
    ``load_yaml`` import every function when the file loads.) For ``"java"``, a ``JavaFunction`` of ``pkg.Class:method`` with
    ``parameter_types`` (a plan using it does not compile here: no JVM).

    Args:
        name: The action's or tool's name (for messages).
        function: The reference.
        language: ``"python"`` (the default) or ``"java"``.
        parameter_types: The Java method's parameter types; Java only.

    Raises:
        ValueError: No reference, a malformed one (or a dotted path that
            does not import),
            ``parameter_types`` for a Python function or none for a Java one;
            the message names ``name`` and says which.
    """
    if language == "java":
        return _java_function(name, function, parameter_types)
    if parameter_types is not None:
        raise ValueError(f"{name!r}: only Java functions declare parameter_types")
    if function is None:
        raise ValueError(f"{name!r}: 'function' is required ('module:qualname')")
    try:
        if ":" in function:
            module, qualname = split_reference(function)
        else:
            _, module, qualname = resolve_callable(function)
    except ValueError as exc:
        raise ValueError(f"{name!r}: {exc}") from None
    return PythonFunction(module=module, qualname=qualname)


def _build_skills(spec: SkillsSpec) -> Skills:
    """The ``Skills`` of a YAML ``skills`` entry: its sources in 0.3.1's
    order (paths, urls, classpath, packages)."""
    sources = [SkillSourceSpec(scheme="local", params={"path": p}) for p in spec.paths]
    sources += [SkillSourceSpec(scheme="url", params={"url": u}) for u in spec.urls]
    sources += [SkillSourceSpec(scheme="classpath", params={"resource": r}) for r in spec.classpath]
    sources += [
        SkillSourceSpec(scheme="package", params={"package": p.package, "resource": p.resource})
        for p in spec.package
    ]
    return Skills(sources=sources)


class _Builder:
    """Builds one file's agents and shared resources from its specs."""

    def __init__(self, source: Source) -> None:
        self.source = source

    def function(self, reference: str | None, loc: Loc, language: str | None) -> Any:
        """A Python function (imported now), or for ``type: java`` the
        ``JavaFunction`` of an action method (``(Event, RunnerContext)``)."""
        if reference is None:
            raise self.source.error(loc + ("function",), "missing required key")
        if language == "java":
            try:
                return JavaFunction.for_action(*_split_java(reference))
            except ValueError as exc:
                raise self.source.error(loc + ("function",), str(exc)) from None
        try:
            return resolve_callable(reference)[0]
        except ValueError as exc:
            raise self.source.error(loc + ("function",), str(exc)) from None

    def java_descriptor(self, spec: DescriptorSpec, resource_type: ResourceType, loc: Loc) -> ResourceDescriptor:
        """0.3.1's form of a ``type: java`` resource: the Python-side wrapper
        class, with the Java class (alias resolved) in ``java_clazz``."""
        wrapper = JAVA_WRAPPER_CLAZZ.get(resource_type)
        if wrapper is None:
            raise self.source.error(
                loc + ("type",),
                f"'java' is not available for a {resource_type.value} resource (Java forms exist for: "
                f"{', '.join(sorted(t.value for t in JAVA_WRAPPER_CLAZZ))})",
            )
        arguments = dict(spec.model_extra or {})
        arguments["java_clazz"] = resolve_clazz(spec.clazz, resource_type, "java")
        return ResourceDescriptor(clazz=wrapper, arguments=arguments)

    def descriptor(self, spec: DescriptorSpec, resource_type: ResourceType, loc: Loc) -> ResourceDescriptor:
        if spec.type == "java":
            return self.java_descriptor(spec, resource_type, loc)
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
                        f"unknown key for {cls.__name__} (its settings: {', '.join(sorted(settings))})"
                        f"{did_you_mean(key, settings)}",
                    )

    def tool(self, spec: ToolSpec, loc: Loc) -> Any:
        if spec.type == "java":
            if spec.function is None:
                raise self.source.error(loc + ("function",), "missing required key")
            try:
                func = _java_function(spec.name, spec.function, spec.parameter_types)
            except ValueError as exc:
                key = "parameter_types" if spec.parameter_types is None else "function"
                raise self.source.error(loc + (key,), str(exc)) from None
            return FunctionTool(func=func)
        if spec.parameter_types is not None:
            raise self.source.error(loc + ("parameter_types",), "only Java tools declare parameter_types")
        func = self.function(spec.function, loc, spec.type)
        try:  # a FunctionTool, as 0.3.1 loads a tool
            return FunctionTool.from_callable(func, name=spec.name, injected_args=spec.injected_args or None)
        except TypeError as exc:
            raise self.source.error(loc + ("function",), str(exc)) from None
        except ValueError as exc:  # pydantic's ValidationError is a ValueError: the injected_args
            raise self.source.error(loc + ("injected_args",), str(exc)) from None

    @staticmethod
    def prompt(spec: PromptSpec) -> Prompt:
        if spec.text:
            return Prompt.from_text(spec.text)
        return Prompt.from_messages(
            [ChatMessage(role=message.role, content=message.content) for message in spec.messages or []]
        )

    @staticmethod
    def skills(spec: SkillsSpec, loc: Loc) -> Skills:
        return _build_skills(spec)

    def check_unique(self, specs: Sequence[Any], loc: Loc, what: str) -> None:
        """A name repeated in ``specs`` (the entries at ``loc``) is an error
        at its second entry, naming the line of the first."""
        seen: Dict[str, int] = {}
        for index, spec in enumerate(specs):
            where = loc + (index, "name")
            if spec.name in seen:
                raise self.source.error(where, f"Duplicate {what} name {spec.name!r} (first at line {seen[spec.name]})")
            seen[spec.name] = self.source.line(where)

    def resources(self, owner: Any, loc: Loc) -> List[Tuple[str, ResourceType, Any, Loc]]:
        """``(name, type, resource, loc)`` of every resource section of
        ``owner`` (an agent spec or the document); a name repeated within a
        section is an error at its second entry."""
        built: List[Tuple[str, ResourceType, Any, Loc]] = []

        def add(section: str, resource_type: ResourceType, specs: Sequence[Any], make: Callable[[Any, Loc], Any]) -> None:
            # Names first: a repeated name is reported even when an entry before it would fail to build.
            self.check_unique(specs, loc + (section,), "shared resource" if not loc else section[:-1])
            for index, spec in enumerate(specs):
                where = loc + (section, index)
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
            raise self.source.error(loc + ("name",), f"Duplicate action name {spec.name!r} in this agent")
        agent.add_action(spec.name, events, function, **(spec.config or {}))

    def agent(
        self, spec: AgentSpec, loc: Loc, shared_actions: Dict[str, Tuple[ActionSpec, Loc]], with_shared: bool
    ) -> Agent:
        """The agent of ``spec``; its references to the file's shared actions
        are checked, and added only ``with_shared`` (``load_yaml``; 0.3.1's
        ``build_agents`` leaves them to its caller)."""
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
                if not with_shared:
                    continue
                if shared.name in agent.actions:
                    raise self.source.error(where, f"Duplicate action name {item!r} in this agent")
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


def _build_file(path: PathLike, with_shared: bool) -> _FileContents:
    source = parse(path)
    doc = validate(source)
    builder = _Builder(source)
    shared = builder.resources(doc, ())
    shared_actions: Dict[str, Tuple[ActionSpec, Loc]] = {}
    builder.check_unique(doc.actions, ("actions",), "shared action")
    for index, action in enumerate(doc.actions):
        loc: Loc = ("actions", index)
        builder.function(action.function, loc, action.type)  # fail here even if no agent uses it
        shared_actions[action.name] = (action, loc)
    agents: Dict[str, Tuple[Agent, Loc]] = {}
    for index, spec in enumerate(doc.agents):
        loc = ("agents", index)
        if spec.name in agents:
            first = source.line(agents[spec.name][1])
            raise source.error(loc + ("name",), f"Duplicate agent name {spec.name!r} (first at line {first})")
        agents[spec.name] = (builder.agent(spec, loc, shared_actions, with_shared), loc)
    return _FileContents(agents, shared, shared_actions, source)


def build_agents(
    path: PathLike,
) -> Tuple[Dict[str, Agent], Dict[ResourceType, Dict[str, Any]], Dict[str, ActionSpec]]:
    """Build the agents one file declares, without an environment, as Flink
    Agents 0.3.1's ``build_agents`` does.

    As in 0.3.1, an agent's references to the file's shared actions
    (``actions: [name]``) are checked but not added to it: ``load_yaml``
    adds them, or the caller does from ``shared_actions``.

    Returns:
        ``(agents, shared_resources, shared_actions)``: agent name ->
        ``Agent``; resource type (every ``ResourceType``) -> name -> the
        file-level resources (descriptors, prompts, tool functions), which
        ``load_yaml`` registers on an environment; name -> the file-level
        ``ActionSpec``.

    Raises:
        YamlAgentError: The file is unreadable or invalid (file, line, key).
    """
    contents = _build_file(path, with_shared=False)
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
        contents = _build_file(path, with_shared=True)
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
