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
from flink_agents.runtime.execution.memory_entries import entry_writes, expired_paths
from flink_agents.runtime.execution.state import KeyState

__all__ = ["LocalDriver"]


class LocalDriver(KeyedDriver):
    """In-process state for the local runner; outputs are ``{key: output}``.

    Args:
        memory_ttl_s: A short-term memory entry (path) not written for this
            long is dropped at the key's next load, as Flink state TTL does
            per ``MapState`` entry in 0.3.1 (``runtime.execution.memory_entries``);
            None keeps memory.
        clock: Unix seconds; injectable for tests.
        memory_ttl_renewed_on_read: Whether the entries a run read are renewed
            too (``KeyState.memory_reads``; Flink's ``OnReadAndWrite``, 0.3.1's
            default update type), else only writes renew (``OnCreateAndWrite``).
    """

    def __init__(
        self, memory_ttl_s: float | None = None, clock: Callable[[], float] = time.time,
        memory_ttl_renewed_on_read: bool = False,
    ) -> None:
        self.states: Dict[Any, KeyState] = {}
        self.outputs: List[Dict[Any, Any]] = []
        self.output_seqs: List[int | None] = []  # the record of each output (``emit_record``)
        self.errors: List[Dict[str, Any]] = []
        self.progress: List[Dict[str, Any]] = []
        self._memory_ttl_s = memory_ttl_s
        self._renew_on_read = memory_ttl_renewed_on_read
        self._clock = clock
        # Per key, with a TTL only: each memory entry as stored, and when it
        # was last written (or renewed).
        self._entries: Dict[Any, Dict[str, str]] = {}
        self._written_at: Dict[Any, Dict[str, float]] = {}
        # The memory map last stored per key: commits replace the map on a
        # write, so a different object means the memory was written.
        self._memory_seen: Dict[Any, Dict[str, Any]] = {}

    def load(self, key: Any) -> KeyState | None:
        state = self.states.get(key)
        if state is not None and self._memory_ttl_s is not None:
            now, written_at = self._clock(), self._written_at.setdefault(key, {})
            expired = expired_paths(written_at, now, self._memory_ttl_s)
            if expired:
                entries = self._entries.setdefault(key, {})
                for path in expired:
                    del written_at[path]
                    entries.pop(path, None)
                state.short_term_memory = {p: v for p, v in state.short_term_memory.items() if p not in expired}
                self._memory_seen[key] = state.short_term_memory
        return state

    def store(self, key: Any, state: KeyState) -> None:
        self.states[key] = state
        reads, state.memory_reads = state.memory_reads, None
        if self._memory_ttl_s is None:
            return
        # Like Flink's TTL on a MapState: a write renews the entries written,
        # and with OnReadAndWrite a read the entries read (by the runs applied).
        now = self._clock()
        entries, written_at = self._entries.setdefault(key, {}), self._written_at.setdefault(key, {})
        if self._memory_seen.get(key) is not state.short_term_memory:
            self._memory_seen[key] = state.short_term_memory
            written, removed = entry_writes(entries, state.short_term_memory)
            for path, text in written.items():
                entries[path], written_at[path] = text, now
            for path in removed:
                entries.pop(path, None)
                written_at.pop(path, None)
        if reads and self._renew_on_read:
            for path in reads:
                if path in written_at:
                    written_at[path] = now

    def emit_error(self, key: Any, error: Dict[str, Any]) -> None:
        self.errors.append(error)

    def emit_progress(self, records: List[Dict[str, Any]]) -> None:
        self.progress.extend(records)

    def emit(self, key: Any, output: Any) -> None:
        self.outputs.append({key: output})
        self.output_seqs.append(None)

    def emit_record(self, key: Any, seq: int | None, output: Any) -> None:
        self.emit(key, output)
        self.output_seqs[-1] = seq
