"""Entry point: ``AgentsExecutionEnvironment.get_execution_environment``.

Without a Flink environment it returns the embedded local runner; with a
``StreamExecutionEnvironment`` it returns the Flink runner. Both drive the same
engine (``flink_agents.runtime``); this module only picks one, lazily, so that
the API never imports the runtime at import time.
"""

from __future__ import annotations

import importlib
import inspect
import os
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List, Sequence

from flink_agents.api.agents.agent import Agent
from flink_agents.api.configuration import Configuration
from flink_agents.api.decorators import RESOURCE_ATTR
from flink_agents.api.resource import ResourceType

__all__ = ["AgentBuilder", "AgentsExecutionEnvironment"]


class AgentBuilder(ABC):
    """Connects an input, an agent and an output."""

    @abstractmethod
    def apply(self, agent: Agent | str) -> "AgentBuilder":
        """Run ``agent`` over the input: an ``Agent``, or the name of one
        registered on the environment (``load_yaml``).

        Raises:
            ValueError: No agent is registered under the name.
            flink_agents.plan.PlanError: The agent does not compile.
        """

    def to_list(self) -> List[Dict[Any, Any]]:
        """Local runner: a list that ``execute()`` fills with ``{key: output}``."""
        raise NotImplementedError("to_list() is offered by the local runner only")

    def to_datastream(self, output_type: Any = None, progress: bool = False, typed_outputs: bool = False) -> Any:
        """Flink runner: the agent's outputs as a ``DataStream``, as JSON-like
        data by default (as Flink Agents 0.3.1), the objects themselves with
        ``typed_outputs=True``; with ``progress=True`` also the progress
        stream (``progress_stream()``)."""
        raise NotImplementedError("to_datastream() is offered by the Flink runner only")

    def progress_stream(self) -> Any:
        """Flink runner: the runs' progress records, each published after the
        journal write that made its step durable (``runtime.features.progress``)."""
        raise NotImplementedError("progress_stream() is offered by the Flink runner only")

    def with_steering(self, steering: Any, key_selector: Any = None) -> "AgentBuilder":
        """A second input of steering messages keyed like the main one: a
        ``DataStream`` and its key selector (Flink), or a list of
        ``{"key", "value"}`` (local runner)."""
        raise NotImplementedError("with_steering() is not offered by this runner")

    def to_progress_list(self) -> List[Dict[str, Any]]:
        """Local runner: opt in to the progress stream; ``execute()`` fills
        the returned list."""
        raise NotImplementedError("to_progress_list() is offered by the local runner only")

    def to_table(self, schema: Any, output_type: Any) -> Any:
        """Flink runner: the agent's outputs as a ``pyflink.table.Table``, as
        Flink Agents 0.3.1 offers it.

        Args:
            schema: A ``pyflink.table.Schema`` whose columns match
                ``output_type``'s fields (None: taken from ``output_type``).
            output_type: The outputs' ``TypeInformation``, usually
                ``Types.ROW_NAMED(names, types)``. Each output (a ``Row``, a
                dict, a pydantic model, a dataclass, a tuple) is converted
                to it; one that does not fit fails the job with an error
                naming the key, the field and the value.

        Raises:
            NotImplementedError: On the local runner.
            TypeError: ``output_type`` or ``schema`` has the wrong type.
        """
        raise NotImplementedError("to_table() is offered by the Flink runner only")


class AgentsExecutionEnvironment(ABC):
    """Where agents run: the local runner or a Flink job."""

    def __init__(self) -> None:
        # Options from code win over the ``agent:`` section of
        # $FLINK_CONF_DIR's config.yaml, read here as Flink Agents 0.3.1 does.
        self._config = Configuration()
        self._config.load_from_flink_conf_dir()
        # Agents registered by name (``load_yaml``), for ``apply("name")``.
        self._agents: Dict[str, Agent] = {}
        # Environment-level (shared) resources: type -> name -> resource.
        self._resources: Dict[ResourceType, Dict[str, Any]] = {t: {} for t in ResourceType}

    @property
    def resources(self) -> Dict[ResourceType, Dict[str, Any]]:
        """Resources registered on the environment: type -> name -> resource.
        Every agent applied here sees them (its own win on a name clash),
        as in Flink Agents 0.3.1."""
        return self._resources

    def add_resource(self, name: str, resource_type: ResourceType, instance: Any) -> "AgentsExecutionEnvironment":
        """Register a resource shared by every agent applied on this environment.

        Args:
            name: Name unique within ``resource_type`` on this environment.
            resource_type: Its kind.
            instance: A ``ResourceDescriptor``, a ``SerializableResource``, or
                a plain function for a tool (as ``Agent.add_resource``).

        Raises:
            ValueError: A resource of this kind and name is already registered.
        """
        by_name = self._resources[ResourceType(resource_type)]
        if name in by_name:
            raise ValueError(f"{ResourceType(resource_type).value} {name!r} is already registered on the environment")
        by_name[name] = instance
        return self

    def load_yaml(self, paths: "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]") -> None:
        """Load YAML agent files: register their agents (applied by name,
        ``apply("name")``) and their file-level resources (``add_resource``),
        as Flink Agents 0.3.1's ``load_yaml`` does. Calls accumulate.

        Raises:
            flink_agents.api.yaml.loader.YamlAgentError: A file is unreadable or
                invalid, or a name is already registered; the message names
                the file, the line and the key.
        """
        from flink_agents.api.yaml.loader import load_yaml as _load_yaml

        _load_yaml(self, paths)

    def _agent_to_apply(self, agent: "Agent | str") -> Agent:
        """``agent``, or the agent registered under that name, with the
        environment's resources merged in (the agent's own win), as Flink
        Agents 0.3.1's ``apply`` does.

        Raises:
            ValueError: No agent is registered under the name.
        """
        if isinstance(agent, str):
            if agent not in self._agents:
                known = ", ".join(sorted(self._agents)) or "none"
                raise ValueError(f"no agent named {agent!r} is registered on the environment (registered: {known})")
            agent = self._agents[agent]
        for resource_type, by_name in self._resources.items():
            shared = {name: value for name, value in by_name.items() if not _declared_by_decorator(agent, name)}
            if shared:
                agent.resources[resource_type] = {**shared, **agent.resources.get(resource_type, {})}
        return agent


    @staticmethod
    def get_execution_environment(env: Any = None, t_env: Any = None, **kwargs: Any) -> "AgentsExecutionEnvironment":
        """The local runner if ``env`` is None, else the Flink runner over ``env``.

        Args:
            env: A ``pyflink.datastream.StreamExecutionEnvironment`` or None.
            t_env: A ``StreamTableEnvironment`` for ``from_table``/``to_table``.
        """
        if env is None:
            module = importlib.import_module("flink_agents.runtime.local.environment")
            return module.LocalExecutionEnvironment(**kwargs)
        module = importlib.import_module("flink_agents.runtime.flink.environment")
        return module.FlinkExecutionEnvironment(env, t_env, **kwargs)

    def get_config(self, path: str | None = None) -> Configuration:
        """The agent configuration; set options before ``execute``.

        A ``Configuration``: typed (``set(AgentExecutionOptions.MAX_RETRIES,
        5)``, ``get_int(key)``) and a mutable mapping (``update({...})``).
        Options set here win over the ``agent:`` section of
        ``$FLINK_CONF_DIR/config.yaml``, which the environment read when it
        was created. Keys: ``flink_agents.api.core_options``.

        Args:
            path: A Flink YAML file whose ``agent:`` section to load as file
                values (0.3.1's local ``get_config(path)``).

        Raises:
            FileNotFoundError: No file at ``path``.
            ValueError: The file is not valid YAML, or its ``agent`` is not
                a mapping.
        """
        if path is not None:
            self._config.load_from_file(path)
        return self._config

    def from_list(self, input: List[Dict[str, Any]]) -> AgentBuilder:
        """Local runner: records ``{"key": k, "value": v}`` (or ``"k"``/``"v"``)."""
        raise NotImplementedError("from_list() is offered by the local runner only")

    def from_datastream(self, input: Any, key_selector: Callable[[Any], Any] | Any = None) -> AgentBuilder:
        """Flink runner: a ``DataStream`` keyed by ``key_selector``."""
        raise NotImplementedError("from_datastream() is offered by the Flink runner only")

    def from_table(self, input: Any, key_selector: Any = None) -> AgentBuilder:
        """Flink runner: the rows of a ``pyflink.table.Table`` (insert-only),
        keyed by ``key_selector``, as Flink Agents 0.3.1 offers it. Each row
        reaches the agent as a ``pyflink.common.Row`` (``InputEvent.input``;
        fields by name: ``row["id"]``, ``row.id``). Without a ``t_env`` given
        to ``get_execution_environment``, one is created from ``env``.

        Args:
            input: The table.
            key_selector: A ``KeySelector`` or a function of the ``Row``.

        Raises:
            NotImplementedError: On the local runner.
            TypeError: ``input`` is not a ``Table``.
            ValueError: No ``key_selector``.
            pyflink.util.exceptions.TableException: The table produces
                updates (a non-windowed aggregate): an agent takes
                insert-only rows.
        """
        raise NotImplementedError("from_table() is offered by the Flink runner only")

    @abstractmethod
    def execute(self, job_name: str | None = None) -> Any:
        """Run what was built."""


def _declared_by_decorator(agent: Agent, name: str) -> bool:
    """Whether the agent's class declares resource ``name`` with a decorator
    (``@tool``, ``@prompt``, ...): such a resource wins over a shared one."""
    member = inspect.getattr_static(type(agent), name, None)
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    return member is not None and hasattr(member, RESOURCE_ATTR)
