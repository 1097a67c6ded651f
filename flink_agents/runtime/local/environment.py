"""The embedded local runner: ``from_list(...).apply(agent).to_list()``.

It drives the engine exactly as the Flink operator does: records go to the
same scheduler (``KeyRunner``: per-key order, at most ``max_concurrent_runs``
runs at once, a bounded backlog) and finished records are applied with the
same step (``runtime.execution.completion``); only the keyed state (a dict) and the
host loop (``local/host.py``, in place of Flink's callbacks) differ.
"""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Mapping

from flink_agents.api.agents.agent import Agent
from flink_agents.api.execution_environment import AgentBuilder, AgentsExecutionEnvironment
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.api.configuration import ConfigurationView
from flink_agents.api.core_options import (
    AgentConfigOptions,
    AgentExecutionOptions,
    RuntimeOptions,
    ShortTermMemoryTtlUpdate,
    validate_options,
)
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.runtime.local.driver import LocalDriver
from flink_agents.runtime.local.host import LocalHost
from flink_agents.runtime.features.steering import steering_error

__all__ = ["LocalExecutionEnvironment"]


def _key_of(index: int, record: Any) -> Any:
    """The key of ``from_list`` record #``index``, after checking the record
    has a value (``_value_of``) and a hashable key.

    Raises:
        TypeError: Not a dict, or an unhashable key.
        ValueError: No ``value`` (or ``v``).
    """
    if not isinstance(record, dict):
        raise TypeError(f"from_list record #{index} is a {type(record).__name__}; expected a dict")
    if "value" not in record and "v" not in record:
        raise ValueError(f"from_list record #{index} has no 'value' (or 'v'): {record!r}")
    if "key" in record or "k" in record:
        key = record["key"] if "key" in record else record["k"]
        try:
            hash(key)
        except TypeError:
            raise TypeError(
                f"from_list record #{index} has an unhashable key {key!r}; keys must be hashable"
            ) from None
        return key
    # Flink Agents 0.3: a record without a key gets a fresh one. Derived from
    # the record's position so that ids derived from keys are reproducible.
    return f"_auto_key_{index}"


def _value_of(record: Dict[str, Any]) -> Any:
    return record["value"] if "value" in record else record["v"]


class _InputOrder:
    """Where each input record stands in the input, to put the outputs back in
    input order: per key, the input positions of its records from its first
    seq on (a key's records take consecutive seqs). Plain ints in a list per
    key, not a tuple per record: a 20,000-record list kept a tuple each alive
    through the run, which cost two full collections (1.9 us a record)."""

    def __init__(self) -> None:
        self._of_key: Dict[Any, tuple[int, List[int]]] = {}

    def add(self, key: Any, first_seq: int, position: int) -> None:
        entry = self._of_key.get(key)
        if entry is None:
            entry = self._of_key[key] = (first_seq, [])
        entry[1].append(position)

    def position(self, key: Any, seq: int | None) -> int | None:
        entry = self._of_key.get(key)
        if entry is None or seq is None or not 0 <= seq - entry[0] < len(entry[1]):
            return None
        return entry[1][seq - entry[0]]


def _in_input_order(driver: LocalDriver, order: _InputOrder, records: int) -> List[Dict[Any, Any]]:
    """The outputs grouped by input record, in input order, each record's in
    the order its run emitted them (those of no record last): Flink Agents
    0.3.1's local runner runs one record at a time, so its list is in that
    order; records of different keys run concurrently here and finish in any
    order."""
    ranks = []
    for output, seq in zip(driver.outputs, driver.output_seqs):
        position = order.position(next(iter(output)), seq)
        ranks.append(records if position is None else position)
    return [driver.outputs[i] for i in sorted(range(len(ranks)), key=ranks.__getitem__)]


class LocalAgentBuilder(AgentBuilder):
    def __init__(self, env: "LocalExecutionEnvironment", records: List[Dict[str, Any]]) -> None:
        # The caller's list itself: read at execute() (see from_list).
        self._env = env
        self._records = records
        self._plan: AgentPlan | None = None
        self._outputs: List[Dict[Any, Any]] = []
        self._errors: List[Dict[str, Any]] = []
        self._progress: List[Dict[str, Any]] | None = None
        self._steering: List[tuple[Any, Any]] = []
        self._executed = False
        self.metrics: Dict[str, Any] | None = None  # filled by execute()

    def apply(self, agent: Agent | str) -> AgentBuilder:
        if self._plan is not None:
            raise RuntimeError("apply() was already called on this input")
        self._plan = AgentPlan.from_agent(self._env._agent_to_apply(agent))
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
                self._steering.append((_key_of(index, message), _value_of(message)))
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

    def _run(self, config: Mapping[str, Any]) -> Dict[str, int]:
        assert self._plan is not None  # registered by apply()
        self._executed = True
        config = {RuntimeOptions.JOURNAL_STORE.key: "memory", **config}
        if self._progress is not None:
            config[RuntimeOptions.PROGRESS_ENABLED.key] = True
        if self._steering:
            config[RuntimeOptions.STEERING_ENABLED.key] = True
        options = validate_options(ConfigurationView(config))
        # A fresh in-memory journal cannot collide with another execution's,
        # so a fixed id keeps derived ids reproducible; a persistent store
        # needs a new namespace per execution unless job-identifier is given.
        in_memory = (options.get(RuntimeOptions.JOURNAL_STORE) or "memory").strip().lower() == "memory"
        default_id = "local" if in_memory else uuid.uuid4().hex[:12]
        engine = AgentEngine(self._plan, options, job_id=options.get(AgentConfigOptions.JOB_IDENTIFIER) or default_id)
        engine.report_shared_store()
        ttl_ms = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS)
        driver = LocalDriver(
            memory_ttl_s=ttl_ms / 1000.0 if ttl_ms else None,
            memory_ttl_renewed_on_read=options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE)
            is ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE,
        )
        max_runs = options.get(RuntimeOptions.MAX_CONCURRENT_RUNS)
        # The loop runs on this thread while the host waits (KeyRunner docstring).
        runner = KeyRunner(engine, max_runs, options.get(RuntimeOptions.MAX_BACKLOG) or 16 * max_runs, loop_thread=False)
        host = LocalHost(engine, driver, runner)
        for key, message in self._steering:
            host.steer(key, message)  # a full queue: an error record
        order = _InputOrder()
        records = self._records
        try:
            keys = [_key_of(i, r) for i, r in enumerate(records)]  # a bad record fails before any runs
            for position, key in enumerate(keys):
                known = driver.states.get(key)
                order.add(key, known.next_seq if known is not None else 0, position)
                host.accept(key, _value_of(records[position]))
            host.drain()
            for key, state in driver.states.items():  # paused or parked by run control: say so, drop nothing
                for record in state.pending:
                    driver.emit_error(key, {
                        "key": key, "seq": record.seq, "record": record.value, "action": None,
                        "error_type": "RecordNotRun", "attempts": 0,
                        "error_message": f"record #{record.seq} of key {key!r} did not run before the input ended: "
                                         "its key is paused (or the record parked) by run control",
                    })
        finally:
            runner.close()
            engine.close()
            self._outputs.extend(_in_input_order(driver, order, len(records)))
            for key, state in driver.states.items():
                for _, message in state.steering:  # nothing silently dropped
                    driver.emit_error(key, steering_error(key, message, RuntimeError(
                        f"steering message for key {key!r} was not taken: no turn of the key took "
                        "steering before the input ended"
                    )))
            self._errors.extend(driver.errors)
            if self._progress is not None:
                self._progress.extend(driver.progress)
            # Built-in and user metrics (runtime.execution.metrics), also of a failed execution.
            self.metrics = engine.counters.metrics.snapshot()
        return engine.counters.as_dict()


class LocalExecutionEnvironment(AgentsExecutionEnvironment):
    """The local runner (no Flink). ``execute()`` runs every applied input."""

    def __init__(self, **config: Any) -> None:
        super().__init__()
        self._config.update(config)
        self._builders: List[LocalAgentBuilder] = []
        self.last_counters: List[Dict[str, int]] = []
        # Per applied input of the last execute(): metric name -> value
        # (MetricRegistry.snapshot; docs/operations.md, "Event log and metrics").
        self.last_metrics: List[Dict[str, Any]] = []

    def from_list(self, input: List[Dict[str, Any]]) -> AgentBuilder:
        """Records ``{"key": k, "value": v}`` (or ``"k"``/``"v"``; without a
        key, one is made from the record's position).

        The list is read when ``execute()`` runs, as in Flink Agents 0.3.1:
        records appended to it after this call are processed too. Records
        already in it are checked now, the rest at ``execute()``.

        Raises:
            TypeError: A record is not a dict, or its key is unhashable.
            ValueError: A record has no ``"value"`` (or ``"v"``).
        """
        if not isinstance(input, list):
            input = list(input)  # an iterator cannot grow: read it once
        for index, record in enumerate(input):
            _key_of(index, record)
        return LocalAgentBuilder(self, input)

    def execute(self, job_name: str | None = None) -> List[Dict[str, int]]:
        """Run every applied input; fills the lists returned by ``to_list()``.

        Returns:
            Per applied input, the engine's counters (records, events,
            actions, outputs, unhandled_events).

        Raises:
            flink_agents.runtime.errors.ActionFailed: An action raised.
        """
        builders, self._builders = self._builders, []
        try:
            self.last_counters = [b._run(self._config) for b in builders]
        finally:
            self.last_metrics = [b.metrics for b in builders if b.metrics is not None]
        return self.last_counters
