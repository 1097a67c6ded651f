"""Entry point: ``AgentsExecutionEnvironment.get_execution_environment``.

Without a Flink environment it returns the embedded local runner; with a
``StreamExecutionEnvironment`` it returns the Flink runner. Both drive the same
engine (``flink_agents.runtime``); this module only picks one, lazily, so that
the API never imports the runtime at import time.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List

from flink_agents.api.agents.agent import Agent

__all__ = ["AgentBuilder", "AgentsExecutionEnvironment"]


class AgentBuilder(ABC):
    """Connects an input, an agent and an output."""

    @abstractmethod
    def apply(self, agent: Agent) -> "AgentBuilder":
        """Run ``agent`` over the input.

        Raises:
            flink_agents.plan.PlanError: The agent does not compile.
        """

    def to_list(self) -> List[Dict[Any, Any]]:
        """Local runner: a list that ``execute()`` fills with ``{key: output}``."""
        raise NotImplementedError("to_list() is offered by the local runner only")

    def to_datastream(self, output_type: Any = None, progress: bool = False) -> Any:
        """Flink runner: the agent's outputs as a ``DataStream``; with
        ``progress=True`` also the progress stream (``progress_stream()``)."""
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
        """Flink runner: the agent's outputs as a ``Table``."""
        raise NotImplementedError("to_table() is offered by the Flink runner only")


class AgentsExecutionEnvironment(ABC):
    """Where agents run: the local runner or a Flink job."""

    def __init__(self) -> None:
        self._config: Dict[str, Any] = {}

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

    def get_config(self) -> Dict[str, Any]:
        """The agent configuration (a dict); set options before ``apply``."""
        return self._config

    def from_list(self, input: List[Dict[str, Any]]) -> AgentBuilder:
        """Local runner: records ``{"key": k, "value": v}`` (or ``"k"``/``"v"``)."""
        raise NotImplementedError("from_list() is offered by the local runner only")

    def from_datastream(self, input: Any, key_selector: Callable[[Any], Any] | Any = None) -> AgentBuilder:
        """Flink runner: a ``DataStream`` keyed by ``key_selector``."""
        raise NotImplementedError("from_datastream() is offered by the Flink runner only")

    def from_table(self, input: Any, key_selector: Any = None) -> AgentBuilder:
        """Flink runner: a ``Table`` keyed by ``key_selector``."""
        raise NotImplementedError("from_table() is offered by the Flink runner only")

    @abstractmethod
    def execute(self, job_name: str | None = None) -> Any:
        """Run what was built."""
