"""Memory observation events and the run-begin snapshot (Flink Agents HEAD).

* Memory events (``api.events.memory_event``): when an action finishes, its
  memory operations are folded into at most one event per scope and kind
  (short-term and sensory writes: path -> last value written, a deleted
  path or a new object -> null; reads: path -> last value read; long-term
  operations as ``features.long_term_memory.observed`` records them into
  ``LongTermObservations``), sent after the
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
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from pydantic import BaseModel

from flink_agents.api.core_options import AgentExecutionOptions, MemoryEventOptions
from flink_agents.api.events.event import Event
from flink_agents.api.events.memory_event import (
    LongTermGetEvent, LongTermSearchEvent, LongTermUpdateEvent, MemoryEvent, SensoryReadEvent, SensoryWriteEvent,
    ShortTermReadEvent, ShortTermWriteEvent,
)
from flink_agents.api.events.run_event import AGENT_RUN_BEGIN_ACTION, AgentRunBeginEvent
from flink_agents.runtime.durability.codec import DecodeError, decode
from flink_agents.runtime.execution.memory import OBJECT, RESERVED_PREFIX, StagedMemory

__all__ = [
    "LongTermObservations", "MemoryEventSwitches", "RUN_BEGIN_STEP", "memory_events", "run_begin_event",
    "start_recording", "switches_for",
]

log = logging.getLogger(__name__)

RUN_BEGIN_STEP = f"{AGENT_RUN_BEGIN_ACTION}@input"


class LongTermObservations:
    """One action's folded long-term operations, in HEAD's shapes:
    ``updates`` ``{set: {item id: text | None (deleted)}}`` with
    ``cleared_sets`` (a clear drops the set's earlier folded writes),
    ``gets`` ``{set: {item id: text}}``, ``searches``
    ``{set: {query: [{"id", "value", "score"}]}}`` (the last hit list per
    set and query; ``score`` is None: the backends here return no score)."""

    __slots__ = ("updates", "cleared_sets", "gets", "searches")

    def __init__(self) -> None:
        self.updates: Dict[str, Dict[str, Any]] = {}
        self.cleared_sets: List[str] = []
        self.gets: Dict[str, Dict[str, Any]] = {}
        self.searches: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}

    def cleared(self, set_name: str) -> None:
        self.updates.pop(set_name, None)
        if set_name not in self.cleared_sets:
            self.cleared_sets.append(set_name)


@dataclass(frozen=True)
class MemoryEventSwitches:
    """Which memory event kinds a job generates."""

    short_term_write: bool = False
    short_term_read: bool = False
    sensory_write: bool = False
    sensory_read: bool = False
    long_term_update: bool = False
    long_term_get: bool = False
    long_term_search: bool = False
    # ``agent-run.begin-event``: each run first sends the key's short-term
    # memory as an ``AgentRunBeginEvent`` (read here so a run reads no option).
    run_begin: bool = False

    def __post_init__(self) -> None:
        # Read at every step: worked out once (the switches are frozen).
        long_term = self.long_term_update or self.long_term_get or self.long_term_search
        object.__setattr__(self, "long_term", long_term)
        object.__setattr__(self, "recording", self.short_term_read or self.sensory_read or long_term)
        object.__setattr__(self, "any", self.short_term_write or self.sensory_write or self.recording)

    #: Whether a long-term memory event kind is on.
    long_term: bool = field(init=False, repr=False, compare=False)
    #: Whether an action's reads (or long-term operations) are recorded.
    recording: bool = field(init=False, repr=False, compare=False)
    #: Whether any memory event kind is on.
    any: bool = field(init=False, repr=False, compare=False)

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
            long_term_update=on(MemoryEventOptions.LONG_TERM_UPDATE),
            long_term_get=on(MemoryEventOptions.LONG_TERM_GET),
            long_term_search=on(MemoryEventOptions.LONG_TERM_SEARCH),
            run_begin=bool(config.get(AgentExecutionOptions.AGENT_RUN_BEGIN_EVENT)),
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
    long_term: LongTermObservations | None = None,
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
    if long_term is not None:
        if switches.long_term_update and (long_term.updates or long_term.cleared_sets):
            updates = {name: items for name, items in long_term.updates.items() if items}
            made.append(LongTermUpdateEvent(key=key_text, value=updates, cleared_sets=list(long_term.cleared_sets)))
        if switches.long_term_get and long_term.gets:
            made.append(LongTermGetEvent(key=key_text, value=long_term.gets))
        if switches.long_term_search and long_term.searches:
            made.append(LongTermSearchEvent(key=key_text, value=long_term.searches))
    return made


def start_recording(switches: MemoryEventSwitches, ctx: Any, trigger: Event) -> None:
    """Start recording what the enabled events need: reads of short-term and
    sensory memory, long-term operations (``ctx.ltm_observations``)."""
    if not switches.recording or MemoryEvent.is_memory_type(trigger.get_type()):
        return
    if switches.short_term_read:
        ctx.short_term.reads = {}
    if switches.sensory_read:
        ctx.sensory.reads = {}
    if switches.long_term:
        ctx.ltm_observations = LongTermObservations()


def run_begin_event(key: Any, short_term_memory: Dict[str, Any], input_event: Event, event_id: Any) -> AgentRunBeginEvent:
    """The run-begin snapshot: value nodes of ``short_term_memory`` (a flat,
    encoded map) by path, with lineage to the run's ``InputEvent``."""
    values = {path: v for path, v in short_term_memory.items() if v != OBJECT}
    event = AgentRunBeginEvent(key=str(key), value=_folded(values), id=event_id)
    event.upstream_event_id = input_event.id
    event.upstream_action_name = AGENT_RUN_BEGIN_ACTION
    return event
