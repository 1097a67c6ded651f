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

Pruning costs what it deletes and touches one journal: each journal's
run-end markers sit in a heap of their own by commit time and the runs of
each (key, record) in an index, so ``prune`` never walks the runs it keeps
nor another journal's; it deletes ``PRUNE_BATCH_RUNS`` runs per hold of the
lock.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from flink_agents.stores.journal import RUN_END, RUN_STEP, TRACE_STEP, JournalEntry, JournalStore, RunKey

RunKeyTail = Tuple[str, int]  # (key, seq) within one journal
from flink_agents.stores.controls import InMemoryControls
from flink_agents.stores.rate_window import InMemoryRateWindow
from flink_agents.stores.memory_callbacks import PRUNE_BATCH_RUNS, InMemoryCallbacks, nested_in

__all__ = ["InMemoryJournalStore"]

AppendHook = Callable[[List[JournalEntry]], None]
_Slot = Tuple[str, int]  # (step, ordinal)
_RUN_END = (RUN_STEP, RUN_END)
_RunEnd = Tuple[float, str, int]  # (committed_at, key, seq) in one journal's heap


class InMemoryJournalStore(InMemoryCallbacks, InMemoryControls, InMemoryRateWindow, JournalStore):
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

    blocking_io = False  # answers from memory: read in place (``JournalStore``)

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        # run -> (step, ordinal) -> (entry, committed_at in Unix seconds)
        self._runs: Dict[RunKey, Dict[_Slot, Tuple[JournalEntry, float]]] = {}
        # (key, seq) -> the journal ids holding a run of that record
        self._journals: Dict[Tuple[str, int], Set[str]] = {}
        # journal id -> a heap of its run-end writes; one a later write replaced is stale
        self._run_ends: Dict[str, List[_RunEnd]] = {}
        self.before_append: Optional[AppendHook] = None
        self.after_append: Optional[AppendHook] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in process memory)"

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
            run = self._runs.get((journal_id, key, seq))
            if run is None:
                run = self._runs[(journal_id, key, seq)] = {}
                self._journals.setdefault((key, seq), set()).add(journal_id)
            for entry in entries:
                run[(entry.step, entry.ordinal)] = (entry, committed_at)
                if (entry.step, entry.ordinal) == _RUN_END:
                    heapq.heappush(self._run_ends.setdefault(journal_id, []), (committed_at, key, seq))
            self.writes += 1
        if self.after_append is not None:
            self.after_append(entries)

    def prune(self, finished_before_s: float, journal_id: str) -> int:
        """Delete every entry of ``journal_id``'s runs whose ``RUN_END``
        entry was committed before ``finished_before_s`` (Unix seconds), with
        the sub-agent runs nested under them (see ``_sql.prune_run``); runs
        without one stay, and so does every other journal's run. At most
        ``PRUNE_BATCH_RUNS`` runs per hold of the lock.

        Returns:
            The number of entries deleted.
        """
        deleted = 0
        while True:
            with self._lock:
                heap = self._run_ends.get(journal_id, [])
                for _ in range(PRUNE_BATCH_RUNS):
                    if not heap or heap[0][0] >= finished_before_s:
                        if not heap:
                            self._run_ends.pop(journal_id, None)
                        return deleted
                    run_end = heapq.heappop(heap)
                    if self._is_current(journal_id, run_end):
                        deleted += self._delete_runs(journal_id, *run_end[1:])

    def journal_ids(self, limit: int) -> List[str]:
        """Up to ``limit`` journal ids with a finished run, sorted."""
        with self._lock:
            return sorted(journal_id for journal_id, heap in self._run_ends.items() if heap)[: max(limit, 0)]

    def runs_without_root_mark(self, journal_id: str, since_s: float, before_s: float, limit: int) -> List[RunKeyTail]:
        """See ``JournalStore.runs_without_root_mark``."""
        with self._lock:
            found = []
            for committed_at, key, seq in sorted(self._run_ends.get(journal_id, [])):
                if not since_s <= committed_at < before_s or not self._is_current(journal_id, (committed_at, key, seq)):
                    continue
                run = self._runs.get((journal_id, key, seq), {})
                if not any(slot[0] == TRACE_STEP and entry.function_id == "root" for slot, (entry, _) in run.items()):
                    found.append((key, seq))
            return found[: max(limit, 0)]

    def _is_current(self, journal_id: str, run_end: _RunEnd) -> bool:
        """Whether ``run_end`` of ``journal_id`` is its run's marker as it
        stands (not pruned, not replaced by a later write)."""
        committed_at, key, seq = run_end
        marker = self._runs.get((journal_id, key, seq), {}).get(_RUN_END)
        return marker is not None and marker[1] == committed_at

    def _delete_runs(self, journal_id: str, key: str, seq: int) -> int:
        """Delete a run and the runs nested under it; returns the entries.
        Call it under the lock."""
        journals = self._journals.get((key, seq), set())
        deleted = 0
        for gone in [other for other in journals if nested_in(other, journal_id)]:
            deleted += len(self._runs.pop((gone, key, seq)))
            journals.discard(gone)
        if not journals:
            self._journals.pop((key, seq), None)
        return deleted

    def _runs_ended_before(self, finished_before_s: float, journal_id: str) -> List[RunKey]:
        """``journal_id``'s runs whose ``RUN_END`` is older than the cutoff:
        a walk of that journal's heap entries below it, never of the rest."""
        ended: List[RunKey] = []
        with self._lock:
            heap, stack = self._run_ends.get(journal_id, []), [0]
            while stack:
                index = stack.pop()
                if index < len(heap) and heap[index][0] < finished_before_s:
                    if self._is_current(journal_id, heap[index]):
                        ended.append((journal_id, *heap[index][1:]))
                    stack += (2 * index + 1, 2 * index + 2)
        return ended

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
        if (type(entry) is JournalEntry and type(entry.step) is str and type(entry.ordinal) is int
                and type(entry.function_id) is str and type(entry.args_digest) is str and type(entry.payload) is str):
            continue  # the runtime's own entries: checked in one test each
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
