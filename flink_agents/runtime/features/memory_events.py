"""Memory observation events and the run-begin snapshot (Flink Agents HEAD).

* Memory events (``api.events.memory_event``): when an action finishes, its
  short-term and sensory memory operations are folded into at most one event
  per scope and kind (writes: path -> last value written, a deleted path or
  a new object -> null; reads: path -> last value read), sent after the
  action's own events. They are part of the action's journaled completion,
  so a replay re-sends exactly them. An action triggered by a memory event
  generates none (no events about events). Switches:
  ``MemoryEventOptions``; every kind is off unless configured.
* ``AgentRunBeginEvent``: with ``agent-run.begin-event`` true, before the
  first action of a run, the key's short-term memory values (value nodes
  only, by dotted path). It is journaled under the step
  ``agent_run_begin_action@input``, so a replay sends the stored snapshot.

Values are the memory's decoded values as JSON (``bytes`` as base64, a
pydantic model as its JSON data); a value without a JSON form is left out
of the event (logged at debug), as HEAD omits unsupported values.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from pydantic import BaseModel

from flink_agents.api.core_options import MemoryEventOptions
from flink_agents.api.events.event import Event
from flink_agents.api.events.memory_event import (
    MemoryEvent, SensoryReadEvent, SensoryWriteEvent, ShortTermReadEvent, ShortTermWriteEvent,
)
from flink_agents.api.events.run_event import AGENT_RUN_BEGIN_ACTION, AgentRunBeginEvent
from flink_agents.runtime.durability.codec import DecodeError, decode
from flink_agents.runtime.execution.memory import OBJECT, RESERVED_PREFIX, StagedMemory

__all__ = ["MemoryEventSwitches", "RUN_BEGIN_STEP", "memory_events", "run_begin_event"]

log = logging.getLogger(__name__)

RUN_BEGIN_STEP = f"{AGENT_RUN_BEGIN_ACTION}@input"


@dataclass(frozen=True)
class MemoryEventSwitches:
    """Which memory event kinds a job generates."""

    short_term_write: bool = False
    short_term_read: bool = False
    sensory_write: bool = False
    sensory_read: bool = False

    @property
    def any(self) -> bool:
        return self.short_term_write or self.short_term_read or self.sensory_write or self.sensory_read

    @staticmethod
    def of(config: Any) -> "MemoryEventSwitches":
        """Each kind: its own option if set, else ``memory.generate-event`` if set, else off."""
        master = config.get(MemoryEventOptions.MEMORY_GENERATE_EVENT)

        def on(option: Any) -> bool:
            own = config.get(option)
            return bool(own if own is not None else master if master is not None else False)

        return MemoryEventSwitches(
            short_term_write=on(MemoryEventOptions.SHORT_TERM_WRITE),
            short_term_read=on(MemoryEventOptions.SHORT_TERM_READ),
            sensory_write=on(MemoryEventOptions.SENSORY_WRITE),
            sensory_read=on(MemoryEventOptions.SENSORY_READ),
        )


_SWITCHES: Dict[int, Tuple[Any, MemoryEventSwitches]] = {}


def switches_for(config: Any) -> MemoryEventSwitches:
    """``MemoryEventSwitches.of(config)``, worked out once per config object."""
    cached = _SWITCHES.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    switches = MemoryEventSwitches.of(config)
    if len(_SWITCHES) >= 256:
        _SWITCHES.clear()
    _SWITCHES[id(config)] = (config, switches)
    return switches


def _json_value(path: str, encoded: Any) -> Tuple[bool, Any]:
    """(kept, JSON form) of one stored memory value."""
    if encoded is None or encoded == OBJECT:
        return True, None
    try:
        value = decode(encoded)
        return True, json.loads(json.dumps(value, allow_nan=False, default=_json_default))
    except (DecodeError, TypeError, ValueError) as exc:
        log.debug("memory event leaves out %s: no JSON form (%s)", path, exc)
        return False, None


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"a {type(value).__name__} has no JSON form")


def _folded(paths: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for path, encoded in paths.items():
        if path.startswith(RESERVED_PREFIX):
            continue  # the runtime's own entries (chat loop state, sessions)
        kept, value = _json_value(path, encoded)
        if kept:
            out[path] = value
    return out


def _writes(memory: StagedMemory) -> Dict[str, Any]:
    diff = memory.diff()
    changed: Dict[str, Any] = dict.fromkeys(diff["del"])
    changed.update(diff["set"])
    return _folded(changed)


def memory_events(
    switches: MemoryEventSwitches, key: Any, trigger: Event, sensory: StagedMemory, short_term: StagedMemory,
) -> List[Event]:
    """The memory events of a finished action (none when it ran on a memory event)."""
    if not switches.any or MemoryEvent.is_memory_type(trigger.get_type()):
        return []
    key_text = str(key)
    made: List[Event] = []
    for on, cls, values in (
        (switches.short_term_write, ShortTermWriteEvent, lambda: _writes(short_term)),
        (switches.short_term_read, ShortTermReadEvent, lambda: _folded(short_term.reads or {})),
        (switches.sensory_write, SensoryWriteEvent, lambda: _writes(sensory)),
        (switches.sensory_read, SensoryReadEvent, lambda: _folded(sensory.reads or {})),
    ):
        if on:
            value = values()
            if value:
                made.append(cls(key=key_text, value=value))
    return made


def track_reads(switches: MemoryEventSwitches, sensory: StagedMemory, short_term: StagedMemory, trigger: Event) -> None:
    """Start recording the reads an enabled read event needs."""
    if MemoryEvent.is_memory_type(trigger.get_type()):
        return
    if switches.short_term_read:
        short_term.reads = {}
    if switches.sensory_read:
        sensory.reads = {}


def run_begin_event(key: Any, short_term_memory: Dict[str, Any], input_event: Event, event_id: Any) -> AgentRunBeginEvent:
    """The run-begin snapshot: value nodes of ``short_term_memory`` (a flat,
    encoded map) by path, with lineage to the run's ``InputEvent``."""
    values = {path: v for path, v in short_term_memory.items() if v != OBJECT}
    event = AgentRunBeginEvent(key=str(key), value=_folded(values), id=event_id)
    event.upstream_event_id = input_event.id
    event.upstream_action_name = AGENT_RUN_BEGIN_ACTION
    return event
