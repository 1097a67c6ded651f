"""An in-process journal store for tests and the local runner.

Entries live in a dict guarded by a lock, so several threads may share one
store; they vanish with the process, so it is durable only in the sense that
matters to a test: an ``append`` that returned is visible to every later read.

Crash recovery is tested through two hooks that may raise:

- ``before_append(entries)`` runs before the write lands: raising simulates a
  crash before the commit (nothing is written, ``writes`` unchanged).
- ``after_append(entries)`` runs right after it landed: raising simulates a
  crash after the commit but before the caller learned of it (the entries
  stay and ``writes`` counts them).

Both run outside the store's lock, so a hook may read the store.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from flink_agents.stores.journal import RUN_END, RUN_STEP, JournalEntry, JournalStore, RunKey
from flink_agents.stores.memory_callbacks import InMemoryCallbacks

__all__ = ["InMemoryJournalStore"]

AppendHook = Callable[[List[JournalEntry]], None]
_Slot = Tuple[str, int]  # (step, ordinal)


class InMemoryJournalStore(InMemoryCallbacks, JournalStore):
    """A dict-backed, thread-safe ``JournalStore`` (and ``CallbackStore``).

    Args:
        clock: Returns the current time in Unix seconds; stamps each append's
            entries (``committed_at``) for ``prune``. Inject a fake in tests.

    Attributes:
        before_append: Called with the entries before an append writes them;
            may raise to simulate a crash before the commit. ``None``: no hook.
        after_append: Called with the entries after an append wrote them; may
            raise to simulate a crash after the commit. ``None``: no hook.
        writes: Appends that wrote (see ``JournalStore``).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        # run -> (step, ordinal) -> (entry, committed_at in Unix seconds)
        self._runs: Dict[RunKey, Dict[_Slot, Tuple[JournalEntry, float]]] = {}
        self.before_append: Optional[AppendHook] = None
        self.after_append: Optional[AppendHook] = None

    def load_run(self, journal_id: str, key: str, seq: int) -> Dict[Tuple[str, int], JournalEntry]:
        """Every entry of one record's run, by (step, ordinal); ``{}`` if none.

        The returned dict is a copy: changing it does not change the store.
        """
        with self._lock:
            run = self._runs.get((journal_id, key, seq), {})
            return {slot: entry for slot, (entry, _) in run.items()}

    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        """Write ``entries`` of one run at once; an existing (step, ordinal) is
        replaced. An empty list writes nothing and is not counted.

        Raises:
            TypeError: An entry is not a ``JournalEntry`` or a field has the
                wrong type (what a SQL driver would reject); nothing is written.
            Exception: Whatever ``before_append`` raises (nothing written) or
                ``after_append`` raises (the entries were written).
        """
        entries = list(entries)
        if not entries:
            return
        _check_entries(entries)
        if self.before_append is not None:
            self.before_append(entries)
        with self._lock:
            committed_at = float(self._clock())
            run = self._runs.setdefault((journal_id, key, seq), {})
            for entry in entries:
                run[(entry.step, entry.ordinal)] = (entry, committed_at)
            self.writes += 1
        if self.after_append is not None:
            self.after_append(entries)

    def prune(self, finished_before_s: float) -> int:
        """Delete every entry of runs whose ``RUN_END`` entry was committed
        before ``finished_before_s`` (Unix seconds); runs without one stay.

        Returns:
            The number of entries deleted.
        """
        deleted = 0
        with self._lock:
            ended = [
                run_key for run_key, run in self._runs.items()
                if (RUN_STEP, RUN_END) in run and run[(RUN_STEP, RUN_END)][1] < finished_before_s
            ]
            for journal_id, key, seq in ended:
                # The run and the sub-agent runs nested under it (see _sql.PRUNE).
                for run_key in [
                    r for r in self._runs
                    if r[1] == key and r[2] == seq and (r[0] == journal_id or r[0].startswith(journal_id + "/"))
                ]:
                    deleted += len(self._runs.pop(run_key))
        return deleted

    def _runs_ended_before(self, finished_before_s: float) -> List[RunKey]:
        with self._lock:
            return [
                run_key for run_key, run in self._runs.items()
                if (RUN_STEP, RUN_END) in run and run[(RUN_STEP, RUN_END)][1] < finished_before_s
            ]

    def count_entries(self) -> int:
        """How many entries the store holds, over all runs."""
        with self._lock:
            return sum(len(run) for run in self._runs.values())


def _check_entries(entries: List[JournalEntry]) -> None:
    """Reject what a SQL store's driver would reject, before anything is written.

    Raises:
        TypeError: Naming the entry's position and the offending field.
    """
    for position, entry in enumerate(entries):
        if not isinstance(entry, JournalEntry):
            raise TypeError(f"entries[{position}] is a {type(entry).__name__}, not a JournalEntry")
        for field in ("step", "function_id", "args_digest", "payload"):
            value = getattr(entry, field)
            if not isinstance(value, str):
                raise TypeError(
                    f"entries[{position}].{field} must be str, got {type(value).__name__}"
                )
        if isinstance(entry.ordinal, bool) or not isinstance(entry.ordinal, int):
            raise TypeError(
                f"entries[{position}].ordinal must be int, got {type(entry.ordinal).__name__}"
            )
