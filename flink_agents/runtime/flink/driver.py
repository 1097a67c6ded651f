"""Flink driver: the host core's port on Flink (``runtime.keyed_host``).

Keyed state in Flink ``ValueState``s, timers through the callback's timer
service, emissions buffered for the operator to yield. Valid only inside
``process_element``/``on_timer`` of the key being loaded or stored
(``begin``): Flink scopes keyed state and timers to the operator's current key.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Tuple

from pyflink.common import Time, Types
from pyflink.datastream import OutputTag
from pyflink.datastream.state import StateTtlConfig, ValueStateDescriptor

from flink_agents.api.configuration import ReadableConfiguration
from flink_agents.api.core_options import (
    AgentExecutionOptions,
    ShortTermMemoryTtlUpdate,
    ShortTermMemoryTtlVisibility,
)
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.execution.state import KeyState

__all__ = ["ERROR_OUTPUT", "FlinkDriver", "KEY_STATE_NAME", "MEMORY_STATE_NAME", "PROGRESS_OUTPUT"]

KEY_STATE_NAME = "flink_agents.key_state.v1"
MEMORY_STATE_NAME = "flink_agents.short_term_memory.v1"
ERROR_OUTPUT = OutputTag("flink_agents_errors", Types.PICKLED_BYTE_ARRAY())
PROGRESS_OUTPUT = OutputTag("flink_agents_progress", Types.PICKLED_BYTE_ARRAY())


def _memory_descriptor(options: ReadableConfiguration) -> ValueStateDescriptor:
    """The short-term memory state, with Flink state TTL when
    ``short-term-memory.state-ttl.ms`` (or ``short_term_memory.ttl_s``) is
    above 0, its update type and visibility from 0.3.1's options."""
    descriptor = ValueStateDescriptor(MEMORY_STATE_NAME, Types.STRING())
    ttl_ms = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS)
    if ttl_ms:
        update = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE)
        visibility = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_VISIBILITY)
        ttl = (
            StateTtlConfig.new_builder(Time.milliseconds(ttl_ms))
            .set_update_type(
                StateTtlConfig.UpdateType.OnReadAndWrite
                if update is ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE
                else StateTtlConfig.UpdateType.OnCreateAndWrite
            )
            .set_state_visibility(
                StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp
                if visibility is ShortTermMemoryTtlVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
                else StateTtlConfig.StateVisibility.NeverReturnExpired
            )
            .build()
        )
        descriptor.enable_time_to_live(ttl)
    return descriptor


class FlinkDriver(KeyedDriver):
    """Maps the engine's per-key state onto two ``ValueState[str]`` (JSON):
    the key's queue and sequence numbers, and its short-term memory, which is
    separate so that a state TTL can apply to memory alone. Both hold values
    encoded by the typed codec (``runtime.execution.state``, ``runtime.execution.memory``).

    The state object is cached between ``load`` and ``store`` within one
    callback; memory is written only when a run changed it (commits replace
    the map, so identity tells). ``begin`` starts a callback for the current
    key with its timer service; ``drain`` hands over what to yield: outputs,
    ``(ERROR_OUTPUT, error record)`` and ``(PROGRESS_OUTPUT, progress record)``.
    """

    def __init__(self, key_state: Any, memory_state: Any) -> None:
        self._key_state = key_state
        self._memory_state = memory_state
        self._current_key: Any = None
        self._timers: Any = None
        self._cached: KeyState | None = None
        self._stored_memory: Dict[str, Any] | None = None
        self._outputs: List[Any] = []
        self._deadlines: Dict[Any, List[Tuple[str, int, int]]] = {}
        self._deadlines_lock = threading.Lock()

    @classmethod
    def of(cls, runtime_context: Any, options: ReadableConfiguration) -> "FlinkDriver":
        """The driver over the operator's two keyed states (``open``)."""
        return cls(
            runtime_context.get_state(ValueStateDescriptor(KEY_STATE_NAME, Types.STRING())),
            runtime_context.get_state(_memory_descriptor(options)),
        )

    def begin(self, key: Any, timers: Any = None) -> None:
        """Start a callback for ``key`` (the operator's current key), with
        the callback's ``TimerService``."""
        self._current_key = key
        self._timers = timers
        self._cached = None
        self._stored_memory = None

    def _check(self, key: Any) -> None:
        if key != self._current_key:
            raise RuntimeError(
                f"keyed state of {key!r} accessed while the operator's current key is "
                f"{self._current_key!r}"
            )

    def load(self, key: Any) -> KeyState | None:
        self._check(key)
        if self._cached is None:
            text = self._key_state.value()
            if text is None:
                return None
            # Memory may be absent alone: expired by its state TTL.
            self._cached = KeyState.from_json(text, self._memory_state.value() or "{}")
            self._stored_memory = self._cached.short_term_memory
        return self._cached

    def store(self, key: Any, state: KeyState) -> None:
        self._check(key)
        self._cached = state
        self._key_state.update(state.to_json(include_memory=False))
        if state.short_term_memory is not self._stored_memory:
            self._memory_state.update(state.memory_json())
            self._stored_memory = state.short_term_memory

    def arm_deadline(self, key: Any, callback_id: str, deadline_ms: int, seq: int) -> None:
        """Queue a callback deadline (from the runs' thread) until the key's
        next callback registers it as a timer (``take_deadlines``): Flink
        timers may only be registered in a callback of their key."""
        with self._deadlines_lock:
            self._deadlines.setdefault(key, []).append((callback_id, deadline_ms, seq))

    def take_deadlines(self, key: Any) -> List[Tuple[str, int, int]]:
        with self._deadlines_lock:
            return self._deadlines.pop(key, [])

    def register_processing_time_timer(self, time_ms: int) -> None:
        self._timers.register_processing_time_timer(time_ms)

    def register_event_time_timer(self, time_ms: int) -> None:
        self._timers.register_event_time_timer(time_ms)

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._timers.current_watermark()

    def emit(self, key: Any, output: Any) -> None:
        self._outputs.append(output)

    def emit_error(self, key: Any, error: Dict[str, Any]) -> None:
        self._outputs.append((ERROR_OUTPUT, error))

    def emit_progress(self, records: List[Dict[str, Any]]) -> None:
        self._outputs.extend((PROGRESS_OUTPUT, record) for record in records)

    def drain(self) -> List[Any]:
        """What was emitted since the last drain, in order, as the operator
        yields it."""
        outputs, self._outputs = self._outputs, []
        return outputs
