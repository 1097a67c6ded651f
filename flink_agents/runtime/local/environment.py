"""The embedded local runner: ``from_list(...).apply(agent).to_list()``.

It drives the engine exactly as the Flink operator does: records go to the
same scheduler (``KeyRunner``: per-key order, at most ``max_concurrent_runs``
runs at once, a bounded backlog) and finished records are applied with the
same step (``runtime.execution.completion``); only the keyed state (a dict) and the
host loop (``local/host.py``, in place of Flink's callbacks) differ.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, List

from flink_agents.api.agents.agent import Agent
from flink_agents.api.execution_environment import AgentBuilder, AgentsExecutionEnvironment
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import DEFAULT_MAX_CONCURRENT_RUNS, MAX_CONCURRENT_RUNS_OPTION, AgentEngine
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.local.host import LocalHost
from flink_agents.runtime.features.progress import PROGRESS_OPTION
from flink_agents.runtime.features.steering import STEERING_OPTION, SteeringQueueFull, steering_error

__all__ = ["LocalExecutionEnvironment", "MAX_CONCURRENT_RUNS_OPTION"]

MAX_BACKLOG_OPTION = "flink.max_backlog"  # the same bound as on Flink


def _split_record(index: int, record: Any) -> tuple[Any, Any]:
    if not isinstance(record, dict):
        raise TypeError(f"from_list record #{index} is a {type(record).__name__}; expected a dict")
    if "value" in record or "v" in record:
        value = record["value"] if "value" in record else record["v"]
    else:
        raise ValueError(f"from_list record #{index} has no 'value' (or 'v'): {record!r}")
    if "key" in record or "k" in record:
        key = record["key"] if "key" in record else record["k"]
        try:
            hash(key)
        except TypeError:
            raise TypeError(
                f"from_list record #{index} has an unhashable key {key!r}; keys must be hashable"
            ) from None
        return key, value
    # Flink Agents 0.3: a record without a key gets a fresh one. Derived from
    # the record's position so that ids derived from keys are reproducible.
    return f"_auto_key_{index}", value


class LocalAgentBuilder(AgentBuilder):
    def __init__(self, env: "LocalExecutionEnvironment", records: List[tuple[Any, Any]]) -> None:
        self._env = env
        self._records = records
        self._plan: AgentPlan | None = None
        self._outputs: List[Dict[Any, Any]] = []
        self._errors: List[Dict[str, Any]] = []
        self._progress: List[Dict[str, Any]] | None = None
        self._steering: List[tuple[Any, Any]] = []
        self._executed = False

    def apply(self, agent: Agent) -> AgentBuilder:
        if self._plan is not None:
            raise RuntimeError("apply() was already called on this input")
        self._plan = AgentPlan.from_agent(agent)
        self._env._builders.append(self)
        return self

    def to_list(self) -> List[Dict[Any, Any]]:
        return self._outputs

    def to_error_list(self) -> List[Dict[str, Any]]:
        """A list that ``execute()`` fills with the error records of records
        skipped under the ``skip`` strategy (see ``FlinkAgentBuilder.error_stream``)."""
        return self._errors

    def with_steering(self, messages: List[Dict[str, Any]]) -> "LocalAgentBuilder":
        """Steering messages ``{"key": k, "value": message}`` (``runtime.features.steering``).
        Given up front, a key's messages wait for its first turn, which
        takes them before its first model call; more than 32 for one key, and
        any no turn took by the end of the input, go to ``to_error_list()``
        as error records.

        Raises:
            RuntimeError: After ``execute()`` ran this input.
            TypeError, ValueError: A message is not ``{"key", "value"}``.
        """
        self._check_not_executed("with_steering")
        for index, message in enumerate(messages):
            try:
                self._steering.append(_split_record(index, message))
            except (TypeError, ValueError) as exc:
                raise type(exc)(str(exc).replace("from_list record", "steering message")) from None
        return self

    def _check_not_executed(self, call: str) -> None:
        if self._executed:
            raise RuntimeError(f"{call}() after execute() has no effect: call it before execute()")

    def to_progress_list(self) -> List[Dict[str, Any]]:
        """Opt in to the progress stream: a list that ``execute()`` fills
        with the runs' progress records (``flink_agents.runtime.features.progress``).

        Raises:
            RuntimeError: After ``execute()`` ran this input.
        """
        if self._progress is None:
            self._check_not_executed("to_progress_list")
            self._progress = []
        return self._progress

    def _run(self, config: Dict[str, Any]) -> Dict[str, int]:
        assert self._plan is not None  # registered by apply()
        self._executed = True
        config = {"journal.store": "memory", **config}
        if self._progress is not None:
            config[PROGRESS_OPTION] = True
        if self._steering:
            config[STEERING_OPTION] = True
        # A fresh in-memory journal cannot collide with another execution's,
        # so a fixed id keeps derived ids reproducible; a persistent store
        # needs a new namespace per execution unless job_id is given.
        default_id = "local" if config["journal.store"] == "memory" else uuid.uuid4().hex[:12]
        engine = AgentEngine(self._plan, config, job_id=str(config.get("job_id") or default_id))
        ttl_s = config.get("short_term_memory.ttl_s")
        driver = LocalDriver(memory_ttl_s=None if ttl_s is None else float(ttl_s))
        max_runs = int(config.get(MAX_CONCURRENT_RUNS_OPTION, DEFAULT_MAX_CONCURRENT_RUNS))
        # The loop runs on this thread while the host waits (KeyRunner docstring).
        runner = KeyRunner(engine, max_runs, int(config.get(MAX_BACKLOG_OPTION, 16 * max_runs)), loop_thread=False)
        host = LocalHost(engine, driver, runner)
        for key, message in self._steering:
            try:
                engine.steer(driver, key, message)
            except SteeringQueueFull as full:
                driver.emit_error(key, steering_error(key, message, full))
        try:
            for key, value in self._records:
                host.accept(key, value)
            host.drain()
        finally:
            runner.close()
            engine.close()
            self._outputs.extend(driver.outputs)
            for key, state in driver.states.items():
                for _, message in state.steering:  # nothing silently dropped
                    driver.emit_error(key, steering_error(key, message, RuntimeError(
                        f"steering message for key {key!r} was not taken: no turn of the key took "
                        "steering before the input ended"
                    )))
            self._errors.extend(driver.errors)
            if self._progress is not None:
                self._progress.extend(driver.progress)
        return engine.counters.as_dict()


class LocalExecutionEnvironment(AgentsExecutionEnvironment):
    """The local runner (no Flink). ``execute()`` runs every applied input."""

    def __init__(self, **config: Any) -> None:
        super().__init__()
        self._config.update(config)
        self._builders: List[LocalAgentBuilder] = []
        self.last_counters: List[Dict[str, int]] = []

    def from_list(self, input: List[Dict[str, Any]]) -> AgentBuilder:
        records = [_split_record(i, r) for i, r in enumerate(input)]
        return LocalAgentBuilder(self, records)

    def execute(self, job_name: str | None = None) -> List[Dict[str, int]]:
        """Run every applied input; fills the lists returned by ``to_list()``.

        Returns:
            Per applied input, the engine's counters (records, events,
            actions, outputs, unhandled_events).

        Raises:
            flink_agents.runtime.errors.ActionFailed: An action raised.
        """
        builders, self._builders = self._builders, []
        self.last_counters = [b._run(self._config) for b in builders]
        return self.last_counters
