"""Flink driver: the host core's port on Flink (``runtime.keyed_host``).

Keyed state in Flink ``ValueState``s, timers through the callback's timer
service, emissions buffered for the operator to yield. Valid only inside
``process_element``/``on_timer`` of the key being loaded or stored
(``begin``): Flink scopes keyed state and timers to the operator's current key.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Dict, List, Tuple

from pyflink.common import Time, Types
from pyflink.datastream import OutputTag
from pyflink.datastream.state import MapStateDescriptor, StateTtlConfig, ValueStateDescriptor

from flink_agents.api.configuration import ReadableConfiguration
from flink_agents.api.core_options import (
    AgentExecutionOptions,
    ShortTermMemoryTtlUpdate,
    ShortTermMemoryTtlVisibility,
)
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.execution.memory_entries import entry_writes
from flink_agents.runtime.execution.state import KeyState

__all__ = [
    "ERROR_OUTPUT", "FlinkDriver", "KEY_STATE_NAME", "LEGACY_MEMORY_STATE_NAME", "MEMORY_STATE_NAME", "PROGRESS_OUTPUT",
]

KEY_STATE_NAME = "flink_agents.key_state.v1"
# Short-term memory, one MapState entry per path (a TTL applies per path, as
# in 0.3.1). Releases before kept it in one ValueState (LEGACY_MEMORY_STATE_NAME),
# read once per key and moved over.
MEMORY_STATE_NAME = "flink_agents.short_term_memory.v2"
LEGACY_MEMORY_STATE_NAME = "flink_agents.short_term_memory.v1"
ERROR_OUTPUT = OutputTag("flink_agents_errors", Types.PICKLED_BYTE_ARRAY())
PROGRESS_OUTPUT = OutputTag("flink_agents_progress", Types.PICKLED_BYTE_ARRAY())


def _memory_ttl(options: ReadableConfiguration) -> StateTtlConfig | None:
    """Flink state TTL of short-term memory when
    ``short-term-memory.state-ttl.ms`` (or ``short_term_memory.ttl_s``) is
    above 0, its update type and visibility from 0.3.1's options."""
    ttl_ms = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS)
    if not ttl_ms:
        return None
    update = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE)
    visibility = options.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_VISIBILITY)
    return (
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


def _memory_descriptor(options: ReadableConfiguration) -> MapStateDescriptor:
    """The short-term memory state: path -> entry JSON, with the TTL."""
    descriptor = MapStateDescriptor(MEMORY_STATE_NAME, Types.STRING(), Types.STRING())
    ttl = _memory_ttl(options)
    if ttl is not None:
        descriptor.enable_time_to_live(ttl)
    return descriptor


def _legacy_memory_descriptor(options: ReadableConfiguration) -> ValueStateDescriptor:
    """The memory state of earlier releases, declared as they did (a
    restored state's TTL setting must match)."""
    descriptor = ValueStateDescriptor(LEGACY_MEMORY_STATE_NAME, Types.STRING())
    ttl = _memory_ttl(options)
    if ttl is not None:
        descriptor.enable_time_to_live(ttl)
    return descriptor


class FlinkDriver(KeyedDriver):
    """Maps the engine's per-key state onto Flink keyed state: a
    ``ValueState[str]`` (JSON) with the key's queue and sequence numbers, and
    a ``MapState[str, str]`` with its short-term memory, one entry per path
    (``runtime.execution.memory_entries``), separate so that a state TTL
    applies to memory alone, per path. Both hold values encoded by the typed
    codec (``runtime.execution.state``, ``runtime.execution.memory``).

    The state object is cached between ``load`` and ``store`` within one
    callback; memory is written only when a run changed it (commits replace
    the map, so identity tells), and then only the entries that changed.
    While the runner holds a key, its state as last read or written is kept
    with its JSON: a callback finding that JSON in the ``ValueState`` takes
    a copy rather than decoding every queued record, and each queued
    record is encoded once (``PendingRecord.state_entry``), not at every
    write (a key's queue was decoded and encoded whole at each record's
    arrival and end: quadratic in its length).
    ``begin`` starts a callback for the current key with its timer service;
    ``drain`` hands over what to yield: outputs, ``(ERROR_OUTPUT, error
    record)`` and ``(PROGRESS_OUTPUT, progress record)``.

    Args:
        key_state: The ``ValueState[str]`` of the key state.
        memory_state: The ``MapState[str, str]`` of short-term memory.
        legacy_memory_state: The ``ValueState[str]`` earlier releases kept
            memory in (read when ``memory_state`` is empty), or None.
    """

    def __init__(self, key_state: Any, memory_state: Any, legacy_memory_state: Any = None) -> None:
        self._key_state = key_state
        self._memory_state = memory_state
        self._legacy_memory_state = legacy_memory_state
        self._current_key: Any = None
        self._timers: Any = None
        self._cached: KeyState | None = None
        # Per key the runner holds: its memory as last loaded or stored, and
        # its entries' JSON, until ``forget``. Read once, not per callback:
        # the key's polls would otherwise read (and, with a TTL renewed on
        # reads, renew) every entry every poll interval.
        self._memory_of: Dict[Any, Tuple[Dict[str, Any], Dict[str, str]]] = {}
        # Likewise the key state's JSON as last read or written, with that
        # state (memory aside): a callback that finds the same text takes a
        # copy instead of decoding every queued record again.
        self._state_of: Dict[Any, Tuple[str, KeyState]] = {}
        self._legacy_loaded = False
        self._outputs: List[Any] = []
        self._deadlines: Dict[Any, List[Tuple[str, int, int]]] = {}
        self._deadlines_lock = threading.Lock()

    @classmethod
    def of(cls, runtime_context: Any, options: ReadableConfiguration) -> "FlinkDriver":
        """The driver over the operator's keyed states (``open``)."""
        return cls(
            runtime_context.get_state(ValueStateDescriptor(KEY_STATE_NAME, Types.STRING())),
            runtime_context.get_map_state(_memory_descriptor(options)),
            runtime_context.get_state(_legacy_memory_descriptor(options)),
        )

    def begin(self, key: Any, timers: Any = None) -> None:
        """Start a callback for ``key`` (the operator's current key), with
        the callback's ``TimerService``."""
        self._current_key = key
        self._timers = timers
        self._cached = None
        self._legacy_loaded = False

    def _check(self, key: Any) -> None:
        if key != self._current_key:
            raise RuntimeError(
                f"keyed state of {key!r} accessed while the operator's current key is "
                f"{self._current_key!r}"
            )

    def load(self, key: Any) -> KeyState | None:
        """The key's state; its memory as last stored while the runner holds
        the key, else from the memory entries (an expired one is not
        returned: TTL), or, with none, from the legacy state, moved over at
        ``store``."""
        self._check(key)
        if self._cached is None:
            text = self._key_state.value()
            if text is None:
                return None
            known = self._memory_of.get(key)
            if known is not None:
                self._cached = self._key_state_of(key, text)
                self._cached.short_term_memory = known[0]
                return self._cached
            entries = {path: entry for path, entry in self._memory_state.items()}
            legacy = None
            if not entries and self._legacy_memory_state is not None:
                legacy = self._legacy_memory_state.value()
            if legacy is not None:
                self._cached = KeyState.from_json(text, legacy)
                self._legacy_loaded = True
            else:
                self._cached = self._key_state_of(key, text)
                self._cached.short_term_memory = {path: json.loads(entry) for path, entry in entries.items()}
            self._memory_of[key] = (self._cached.short_term_memory, entries)
        return self._cached

    def _key_state_of(self, key: Any, text: str) -> KeyState:
        """The key state ``text`` holds, memory aside: a copy of the one last
        read or written for ``key`` when the text is the same (only this
        operator writes it), else decoded."""
        known = self._state_of.get(key)
        if known is not None and known[0] == text:
            return known[1].copy()
        state = KeyState.from_json(text, "{}")
        self._state_of[key] = (text, state.copy())
        return state

    def store(self, key: Any, state: KeyState) -> None:
        """Write ``state``: the key state, the memory entries a run changed
        (and, after a run that read memory under a TTL renewed on reads, a
        read of each path it read, which renews it in Flink's state TTL)."""
        self._check(key)
        self._cached = state
        text = state.to_json(include_memory=False)
        self._key_state.update(text)
        self._state_of[key] = (text, state.copy())
        memory, entries = self._memory_of.get(key) or ({}, {})
        written: Dict[str, str] = {}
        if state.short_term_memory is not memory or self._legacy_loaded:
            written, removed = entry_writes(entries, state.short_term_memory)
            for path, entry in written.items():  # (PyFlink 2.3's put_all takes pairs, not a dict)
                self._memory_state.put(path, entry)
            for path in removed:
                self._memory_state.remove(path)
            entries = {**{p: t for p, t in entries.items() if p not in removed}, **written}
            self._memory_of[key] = (state.short_term_memory, entries)
            if self._legacy_loaded:
                self._legacy_memory_state.clear()
                self._legacy_loaded = False
        if state.memory_reads:
            for path in state.memory_reads:
                if path in entries and path not in written:
                    self._memory_state.get(path)
            state.memory_reads = None

    def forget(self, key: Any) -> None:
        self._memory_of.pop(key, None)
        self._state_of.pop(key, None)

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
