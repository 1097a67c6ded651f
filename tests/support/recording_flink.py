"""A recording Flink host, in process, without a JVM.

The real operator (``runtime/flink/operator.py: AgentOperatorFunction``) is
opened on a fake runtime context and called the way Flink calls it:
``process_element`` for each input record, ``on_timer`` for each timer that
comes due. So the driver is built by the operator itself, through
``FlinkDriver.of`` and ``FlinkDriver``'s real constructor, over fake keyed
``ValueState`` objects, and the host core (``runtime/keyed_host.py``) runs
exactly as on Flink, with its polls, callback deadlines and the end-of-time
timer. What a Flink task would see is recorded in one log, in order:

- ``Callback``: each call of the operator (``process`` or a timer), its key;
- ``StateWrite``: each ``ValueState.update``/``clear`` (state name, key, text);
- ``TimerRegistration``: each timer the callback registered;
- ``Emission``: each value the callback yielded (outputs, and error or
  progress records tagged with their ``OutputTag``'s name).

The fakes offer exactly PyFlink's APIs (they subclass ``ValueState``,
``TimerService`` and ``KeyedProcessFunction.Context``/``OnTimerContext``):
a keyed state is a dict per state name, read and written for the key of the
current callback, as Flink's keyed state backend scopes it.

Time: a small deterministic clock. Processing time starts at the wall clock
(callback deadlines are Unix ms) and moves only when the host moves it: by
``tick_ms`` before each input record, and after the input to the next
processing-time timer, firing due timers in timestamp order (Flink dedups
equal timers of a key), until none is left (every key idle: its polls stop).
Between polls the host waits a little real time, for the runs (on the
runner's own thread) to go on. The watermark is Long.MIN_VALUE during the
input (no watermark strategy) and Long.MAX_VALUE at its end (a bounded
input's final watermark), which fires the event-time timers in timestamp
order. A callback that raises fails the job: the host stops there, as a
Flink job without restarts does (``RecordedRun.failure``).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Set, Tuple

from pyflink.datastream import KeyedProcessFunction, TimeDomain, TimerService
from pyflink.datastream.state import MapState, ValueState

from flink_agents.api.agents.agent import Agent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.flink.driver import ERROR_OUTPUT, KEY_STATE_NAME, PROGRESS_OUTPUT
from flink_agents.runtime.flink.operator import NO_TIMESTAMP, AgentOperatorFunction

__all__ = [
    "Callback", "Emission", "RecordedRun", "RecordingFlinkHost", "StateWrite", "TimerRegistration", "run",
]

MIN_WATERMARK = -(2**63)  # Long.MIN_VALUE: no watermark yet
MAX_WATERMARK = 2**63 - 1  # Long.MAX_VALUE: the final watermark of a bounded input
PROCESSING = "processing"
EVENT = "event"


@dataclass(frozen=True)
class Callback:
    """One call of the operator: ``process`` (an input record) or a timer
    (``processing``/``event``) of ``key`` at ``timestamp``."""

    index: int
    kind: str
    key: Any
    timestamp: int | None
    now_ms: int


@dataclass(frozen=True)
class StateWrite:
    """A ``ValueState.update`` (``text``) or ``clear`` (``text`` None)."""

    callback: int
    key: Any
    state: str
    text: str | None


@dataclass(frozen=True)
class TimerRegistration:
    callback: int
    key: Any
    domain: str  # PROCESSING or EVENT
    timestamp: int


@dataclass(frozen=True)
class Emission:
    """A value the callback yielded: ``kind`` "output", "error" or "progress"."""

    callback: int
    key: Any
    kind: str
    value: Any


@dataclass
class RecordedRun:
    """The contract suite's ``Result`` (outputs, errors, failure,
    failure_text) and what the recording shows."""

    outputs: List[Any] = field(default_factory=list)
    errors: List[Dict[str, Any]] = field(default_factory=list)
    failure: BaseException | None = None
    log: List[Any] = field(default_factory=list)  # Callback, StateWrite, TimerRegistration, Emission, in order
    states: Dict[str, Dict[Any, str]] = field(default_factory=dict)  # state name -> key -> text, at the end

    @property
    def failure_text(self) -> str:
        return "" if self.failure is None else str(self.failure)

    def _of(self, kind: type) -> List[Any]:
        return [entry for entry in self.log if isinstance(entry, kind)]

    @property
    def callbacks(self) -> List[Callback]:
        return self._of(Callback)

    @property
    def writes(self) -> List[StateWrite]:
        return self._of(StateWrite)

    @property
    def timers(self) -> List[TimerRegistration]:
        return self._of(TimerRegistration)

    @property
    def emissions(self) -> List[Emission]:
        return self._of(Emission)


# --- PyFlink's APIs, faked ----------------------------------------------------------------------


class _RecordingValueState(ValueState):
    """A keyed ``ValueState``: one value per key, for the host's current key."""

    def __init__(self, host: "RecordingFlinkHost", name: str) -> None:
        self._host = host
        self._name = name
        self._values: Dict[Any, Any] = host.run_record.states.setdefault(name, {})

    def value(self) -> Any:
        return self._values.get(self._host.current_key())

    def update(self, value: Any) -> None:
        key = self._host.current_key()
        self._values[key] = value
        self._host.record(StateWrite(self._host.callback_index, key, self._name, value))

    def clear(self) -> None:
        key = self._host.current_key()
        self._values.pop(key, None)
        self._host.record(StateWrite(self._host.callback_index, key, self._name, None))


class _RecordingMapState(MapState):
    """A keyed ``MapState``: one map per key, for the host's current key.
    Writes are logged as ``StateWrite`` of ``"<name>[<map key>]"``."""

    def __init__(self, host: "RecordingFlinkHost", name: str) -> None:
        self._host = host
        self._name = name
        self._maps: Dict[Any, Dict[Any, Any]] = host.run_record.states.setdefault(name, {})

    def _map(self) -> Dict[Any, Any]:
        return self._maps.setdefault(self._host.current_key(), {})

    def _log(self, map_key: Any, value: Any) -> None:
        self._host.record(StateWrite(self._host.callback_index, self._host.current_key(),
                                     f"{self._name}[{map_key}]", value))

    def get(self, key: Any) -> Any:
        return self._map().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._map()[key] = value
        self._log(key, value)

    def put_all(self, dict_value: Dict[Any, Any]) -> None:
        for key, value in dict_value.items():
            self.put(key, value)

    def remove(self, key: Any) -> None:
        del self._map()[key]
        self._log(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._map()

    def items(self) -> Iterable[Tuple[Any, Any]]:
        return list(self._map().items())

    def keys(self) -> Iterable[Any]:
        return list(self._map())

    def values(self) -> Iterable[Any]:
        return list(self._map().values())

    def is_empty(self) -> bool:
        return not self._map()

    def clear(self) -> None:
        for key in list(self._map()):
            self.remove(key)


class _RecordingTimerService(TimerService):
    """The callback's timer service: registrations go to the host's queues."""

    def __init__(self, host: "RecordingFlinkHost") -> None:
        self._host = host

    def current_processing_time(self) -> int:
        return self._host.now_ms

    def current_watermark(self) -> int:
        return self._host.watermark

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._host.register(PROCESSING, timestamp)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._host.register(EVENT, timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise AssertionError("the host core never deletes a timer")

    def delete_event_time_timer(self, timestamp: int) -> None:
        raise AssertionError("the host core never deletes a timer")


class _Context(KeyedProcessFunction.OnTimerContext):
    def __init__(self, host: "RecordingFlinkHost", key: Any, timestamp: int, domain: TimeDomain | None) -> None:
        self._host, self._key, self._timestamp, self._domain = host, key, timestamp, domain

    def get_current_key(self) -> Any:
        return self._key

    def timer_service(self) -> TimerService:
        return self._host.timer_service

    def timestamp(self) -> int:
        return self._timestamp

    def time_domain(self) -> TimeDomain:
        assert self._domain is not None, "time_domain() outside on_timer"
        return self._domain


class _Metric:
    def inc(self, n: int = 1) -> None: ...
    def dec(self, n: int = 1) -> None: ...
    def mark_event(self, n: int = 1) -> None: ...
    def update(self, value: int) -> None: ...


class _MetricGroup:
    def add_group(self, *names: str) -> "_MetricGroup":
        return self

    def counter(self, name: str) -> _Metric:
        return _Metric()

    meter = distribution = counter

    def gauge(self, name: str, obj: Callable[[], int]) -> None: ...


class _RuntimeContext:
    """What the operator's ``open`` reads of PyFlink's ``RuntimeContext``."""

    def __init__(self, host: "RecordingFlinkHost") -> None:
        self._host = host

    def get_state(self, descriptor: Any) -> ValueState:
        return _RecordingValueState(self._host, descriptor.name)

    def get_map_state(self, descriptor: Any) -> MapState:
        return _RecordingMapState(self._host, descriptor.name)

    def get_metrics_group(self) -> _MetricGroup:
        return _MetricGroup()

    def get_task_name(self) -> str:
        return "agent (recording)"

    def get_index_of_this_subtask(self) -> int:
        return 0

    def get_number_of_parallel_subtasks(self) -> int:
        return 1


# --- the host -----------------------------------------------------------------------------------


class RecordingFlinkHost:
    """One subtask of the agent operator, called as Flink calls it (see the
    module docstring).

    Args:
        agent: The agent.
        config: The job's configuration (flat keys); journal store "memory"
            unless given.
        tick_ms: Processing time that passes before each input record.
        real_wait_s: The real time waited before each timer fired after the
            input, at most (for the runs, on their own thread, to go on).
        typed_outputs: As ``AgentOperatorFunction`` (``to_datastream``'s
            parameter); True here: the engine's outputs as the runs built them.
    """

    def __init__(self, agent: Agent, config: Dict[str, Any] | None = None, *, tick_ms: int = 40,
                 real_wait_s: float = 0.005, typed_outputs: bool = True) -> None:
        self.run_record = RecordedRun()
        self.now_ms = int(time.time() * 1000) // 1000 * 1000
        self.watermark = MIN_WATERMARK
        self.callback_index = -1
        self.timer_service = _RecordingTimerService(self)
        self._tick_ms = tick_ms
        self._real_wait_s = real_wait_s
        self._key: Any = None
        self._in_callback = False
        self._queues: Dict[str, List[Tuple[int, int, Any]]] = {PROCESSING: [], EVENT: []}
        self._queued: Dict[str, Set[Tuple[Any, int]]] = {PROCESSING: set(), EVENT: set()}
        self._order = 0  # ties: in registration order
        self.operator = AgentOperatorFunction(
            AgentPlan.from_agent(agent), {"journal.store": "memory", **(config or {})}, "recording",
            typed_outputs=typed_outputs,
        )
        self.operator.open(_RuntimeContext(self))  # type: ignore[arg-type]

    # what the fakes call

    def current_key(self) -> Any:
        assert self._in_callback, "keyed state touched outside a callback"
        return self._key

    def record(self, entry: Any) -> None:
        self.run_record.log.append(entry)

    def register(self, domain: str, timestamp: int) -> None:
        assert self._in_callback, "a timer registered outside a callback"
        self.record(TimerRegistration(self.callback_index, self._key, domain, timestamp))
        if (self._key, timestamp) in self._queued[domain]:
            return  # Flink keeps one timer per key, timestamp and domain
        self._queued[domain].add((self._key, timestamp))
        self._order += 1
        heapq.heappush(self._queues[domain], (timestamp, self._order, self._key))

    # the calls Flink makes

    def _call(self, kind: str, key: Any, timestamp: int | None, calls: Callable[[], Iterable[Any]]) -> None:
        self.callback_index += 1
        self._key, self._in_callback = key, True
        self.record(Callback(self.callback_index, kind, key, timestamp, self.now_ms))
        try:
            for item in calls():
                self._emitted(key, item)
        finally:
            self._in_callback = False

    def _emitted(self, key: Any, item: Any) -> None:
        if isinstance(item, tuple) and len(item) == 2 and item[0] is ERROR_OUTPUT:
            self.record(Emission(self.callback_index, key, "error", item[1]))
            self.run_record.errors.append(item[1])
        elif isinstance(item, tuple) and len(item) == 2 and item[0] is PROGRESS_OUTPUT:
            self.record(Emission(self.callback_index, key, "progress", item[1]))
        else:
            self.record(Emission(self.callback_index, key, "output", item))
            self.run_record.outputs.append(item)

    def process_element(self, key: Any, value: Any, timestamp: int | None = None) -> None:
        stamp = NO_TIMESTAMP if timestamp is None else timestamp
        context = _Context(self, key, stamp, None)
        self._call("process", key, timestamp, lambda: self.operator.process_element(value, context))

    def _fire(self, domain: str, through: int) -> bool:
        """Fire the first timer of ``domain`` due at ``through``; whether one was."""
        queue = self._queues[domain]
        if not queue or queue[0][0] > through:
            return False
        timestamp, _, key = heapq.heappop(queue)
        self._queued[domain].discard((key, timestamp))
        flink_domain = TimeDomain.PROCESSING_TIME if domain == PROCESSING else TimeDomain.EVENT_TIME
        context = _Context(self, key, timestamp, flink_domain)
        self._call(domain, key, timestamp, lambda: self.operator.on_timer(timestamp, context))
        return True

    def advance_to(self, now_ms: int) -> None:
        """Processing time moves to ``now_ms``: due timers fire, in order."""
        while self._queues[PROCESSING] and self._queues[PROCESSING][0][0] <= now_ms:
            self.now_ms = max(self.now_ms, self._queues[PROCESSING][0][0])
            self._fire(PROCESSING, self.now_ms)
        self.now_ms = max(self.now_ms, now_ms)

    def poll_until_idle(self, max_timers: int = 2000) -> None:
        """Fire processing-time timers, the next one each time, until none is
        registered (every key idle: its polls stopped).

        Raises:
            AssertionError: Still firing after ``max_timers`` timers (polls
                that never stop, or a run that never ends).
        """
        for _ in range(max_timers):
            if not self._queues[PROCESSING]:
                return
            due = self._queues[PROCESSING][0][0]
            time.sleep(min(self._real_wait_s, max(due - self.now_ms, 0) / 1000.0))
            self.now_ms = max(self.now_ms, due)
            self._fire(PROCESSING, self.now_ms)
        if self._queues[PROCESSING]:
            raise AssertionError(f"processing-time timers still firing after {max_timers}: a key never idle")

    def end_of_input(self) -> None:
        """The final watermark: every event-time timer fires, in order."""
        self.watermark = MAX_WATERMARK
        while self._fire(EVENT, MAX_WATERMARK):
            pass

    def close(self) -> None:
        self.operator.close()


def run(agent: Agent, records: List[Dict[str, Any]], typed_outputs: bool = True, **config: Any) -> RecordedRun:
    """``records`` (``{"key", "value"}``, optionally ``"timestamp"``) through
    the recording host: each input record after ``tick_ms`` of processing
    time, then the polls until every key is idle, then the final watermark.
    A callback's failure ends the run (``failure``), as a job without
    restarts. The outputs are the objects the actions built
    (``to_datastream(typed_outputs=True)``), or with ``typed_outputs=False``
    their JSON-like form (``to_datastream()``'s default)."""
    host = RecordingFlinkHost(agent, config, typed_outputs=typed_outputs)
    try:
        for record in records:
            host.advance_to(host.now_ms + host._tick_ms)
            host.process_element(record["key"], record["value"], record.get("timestamp"))
        host.poll_until_idle()
        host.end_of_input()
    except AssertionError:  # the host's own checks: not a job failure
        raise
    except Exception as failure:  # the job fails
        host.run_record.failure = failure
    finally:
        host.close()
    return host.run_record
