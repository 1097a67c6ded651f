"""Local driver: the host core's port on the local runner
(``runtime.keyed_host``): keyed state in a dict, outputs appended to lists,
no timers (the core applies every key's work as it comes).

State objects stay in the dict as they are, but what the Flink driver puts
through JSON goes through the same codec here: short-term memory holds
encoded values already (``runtime.execution.memory``), and the core admits
each input record and steering message (``runtime.execution.state.admit``)
on both runners, so a run sees the same values on both, and a record the
codec refuses fails the same way.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.execution.state import KeyState

__all__ = ["LocalDriver"]


class LocalDriver(KeyedDriver):
    """In-process state for the local runner; outputs are ``{key: output}``.

    Args:
        memory_ttl_s: Short-term memory of a key not written for this long is
            dropped at the key's next load (as Flink state TTL does); None keeps it.
        clock: Unix seconds; injectable for tests.
        memory_ttl_renewed_on_read: Whether a load of the key also renews the
            TTL (Flink's ``OnReadAndWrite``; 0.3.1's default update type),
            else only writes do (``OnCreateAndWrite``).
    """

    def __init__(
        self, memory_ttl_s: float | None = None, clock: Callable[[], float] = time.time,
        memory_ttl_renewed_on_read: bool = False,
    ) -> None:
        self.states: Dict[Any, KeyState] = {}
        self.outputs: List[Dict[Any, Any]] = []
        self.errors: List[Dict[str, Any]] = []
        self.progress: List[Dict[str, Any]] = []
        self._memory_ttl_s = memory_ttl_s
        self._renew_on_read = memory_ttl_renewed_on_read
        self._clock = clock
        self._memory_written_at: Dict[Any, float] = {}
        # The memory map last stored per key: commits replace the map on a
        # write, so a different object means the memory was written.
        self._memory_seen: Dict[Any, Dict[str, Any]] = {}

    def load(self, key: Any) -> KeyState | None:
        state = self.states.get(key)
        if state is not None and self._memory_ttl_s is not None:
            written = self._memory_written_at.get(key)
            if written is not None and self._clock() - written >= self._memory_ttl_s:
                state.short_term_memory = {}
                del self._memory_written_at[key]
            elif written is not None and self._renew_on_read:
                self._memory_written_at[key] = self._clock()
        return state

    def store(self, key: Any, state: KeyState) -> None:
        self.states[key] = state
        # Like Flink's OnCreateAndWrite TTL: a write of the memory renews it.
        if self._memory_seen.get(key) is not state.short_term_memory:
            self._memory_seen[key] = state.short_term_memory
            self._memory_written_at[key] = self._clock()

    def emit_error(self, key: Any, error: Dict[str, Any]) -> None:
        self.errors.append(error)

    def emit_progress(self, records: List[Dict[str, Any]]) -> None:
        self.progress.extend(records)

    def emit(self, key: Any, output: Any) -> None:
        self.outputs.append({key: output})
