"""``CallbackStore`` in process memory, mixed into ``InMemoryJournalStore``.

Rows live in a dict under the store's lock, so the ingress and the runtime
may share one store object when they run in one process (tests, the local
runner); nothing survives the process. An index by (key, record) lets
``prune_callbacks`` touch only the callbacks it deletes.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Dict, Iterable, List, Optional, Set, Tuple

from flink_agents.stores.callbacks import (
    ACCEPTED,
    CLOSED,
    FINAL_STATES,
    FINISHED,
    PENDING,
    UNKNOWN,
    CallbackRecord,
    CallbackRef,
    CallbackStore,
    CompleteResult,
)
from flink_agents.stores.capabilities import new_capability_token

__all__ = ["InMemoryCallbacks", "PRUNE_BATCH_RUNS", "nested_in"]

# Runs pruned per hold of the store's lock (as the SQL stores' transactions).
PRUNE_BATCH_RUNS = 256


def nested_in(journal_id: str, parent: str) -> bool:
    """Whether ``journal_id`` is ``parent`` or a sub-agent journal under it
    (``"<parent>/<call id>"``, at any depth)."""
    return journal_id == parent or journal_id.startswith(parent + "/")


class InMemoryCallbacks(CallbackStore):
    """Mixin: the callback port over ``self._callbacks`` under ``self._lock``."""

    _lock: threading.Lock

    def _callback_rows(self) -> Dict[str, CallbackRecord]:
        rows = self.__dict__.get("_callbacks")
        if rows is None:
            rows = self.__dict__["_callbacks"] = {}
        return rows

    def _callbacks_by_record(self) -> Dict[Tuple[str, int], Set[str]]:
        """(key, seq) -> the ids of that record's callbacks, any journal."""
        index = self.__dict__.get("_callback_index")
        if index is None:
            index = self.__dict__["_callback_index"] = {}
        return index

    def register(
        self, ref: CallbackRef, callback_id: str, purpose: str, created_ms: int, deadline_ms: int,
        resolve_token: Optional[str] = None, reject_token: Optional[str] = None,
        details: Optional[str] = None,
    ) -> CallbackRecord:
        with self._lock:
            rows = self._callback_rows()
            for row in rows.values():
                if row.ref == ref:
                    return row
            if callback_id in rows:
                raise ValueError(f"callback id {callback_id!r} is registered for another call")
            row = CallbackRecord(
                callback_id, ref, purpose, int(created_ms), int(deadline_ms), PENDING,
                resolve_token=resolve_token or new_capability_token(),
                reject_token=reject_token or new_capability_token(),
                details=details,
            )
            rows[callback_id] = row
            self._callbacks_by_record().setdefault((ref.key, ref.seq), set()).add(callback_id)
            return row

    def complete(
        self, callback_id: str, state: str, body: Optional[bytes], now_ms: int, count_late: bool = False
    ) -> CompleteResult:
        if state not in FINAL_STATES:
            raise ValueError(f"cannot complete a callback as {state!r}; final states are {FINAL_STATES}")
        with self._lock:
            rows = self._callback_rows()
            row = rows.get(callback_id)
            if row is None:
                return CompleteResult(UNKNOWN, None)
            if row.state != PENDING:
                if count_late:
                    row = rows[callback_id] = dataclasses.replace(row, late_completions=row.late_completions + 1)
                return CompleteResult(FINISHED, row)
            row = rows[callback_id] = dataclasses.replace(
                row, state=state, body=None if body is None else bytes(body), completed_ms=int(now_ms)
            )
            return CompleteResult(ACCEPTED, row)

    def get_callback(self, callback_id: str) -> Optional[CallbackRecord]:
        with self._lock:
            return self._callback_rows().get(callback_id)

    def finished_callbacks(self, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
        with self._lock:
            rows = self._callback_rows()
            found = (rows.get(callback_id) for callback_id in callback_ids)
            return {row.callback_id: row for row in found if row is not None and row.state != PENDING}

    def close_run(self, journal_id: str, key: str, seq: int, now_ms: int) -> int:
        closed = 0
        with self._lock:
            rows = self._callback_rows()
            for callback_id, row in list(rows.items()):
                ref = row.ref
                if row.state == PENDING and (ref.journal_id, ref.key, ref.seq) == (journal_id, key, seq):
                    rows[callback_id] = dataclasses.replace(row, state=CLOSED, completed_ms=int(now_ms))
                    closed += 1
        return closed

    def prune_callbacks(self, finished_before_s: float, journal_id: str) -> int:
        """Delete the callbacks of ``journal_id``'s runs that ended before the
        cutoff and of the runs nested under them, ``PRUNE_BATCH_RUNS`` runs
        per hold of the lock; returns how many."""
        ended = self._runs_ended_before(finished_before_s, journal_id)
        deleted = 0
        for start in range(0, len(ended), PRUNE_BATCH_RUNS):
            with self._lock:
                rows, index = self._callback_rows(), self._callbacks_by_record()
                for journal_id, key, seq in ended[start : start + PRUNE_BATCH_RUNS]:
                    ids = index.get((key, seq), set())
                    for callback_id in [c for c in ids if nested_in(rows[c].ref.journal_id, journal_id)]:
                        del rows[callback_id]
                        ids.discard(callback_id)
                        deleted += 1
                    if not ids:
                        index.pop((key, seq), None)
        return deleted

    def _runs_ended_before(self, finished_before_s: float, journal_id: str) -> List[Tuple[str, str, int]]:
        """(journal id, key, seq) of ``journal_id``'s runs whose RUN_END is
        older than the cutoff."""
        raise NotImplementedError
