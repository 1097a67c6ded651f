"""The journal port: the one interface through which the runtime reads and
writes durable call results. Stores implement it and nothing else.

An entry is keyed by (journal id, key, record sequence number, step,
ordinal). ``step`` names an action invocation within a record's run
(``"<action>@<event index>"``); ``ordinal`` counts the journaled calls within
that step from 0, ``COMPLETION`` marks the step's completion (its sent
events and memory writes), and ``FAILED_ATTEMPTS`` counts the step's
attempts that failed and were retried. ``RUN_END`` under step ``"_run"`` marks a finished
run; pruning keys off it.

Values are JSON text written by the runtime; stores treat them as opaque.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Dict, List, Tuple

__all__ = ["COMPLETION", "FAILED_ATTEMPTS", "JournalEntry", "JournalStore", "RUN_END", "RUN_STEP", "TRACE_STEP"]

COMPLETION = -1  # ordinal of a step's completion entry
RUN_END = -2  # ordinal of the run-end marker (under RUN_STEP)
FAILED_ATTEMPTS = -3  # ordinal of a step's count of failed attempts that were retried
RUN_STEP = "_run"
# Marks of spans exported for the run (``runtime.features.tracing``): ordinal
# per export batch, payload ``{"spans": [span id hex, ...]}``. Not a step of
# the run: a replay reads them only to not export a span twice.
TRACE_STEP = "_traced"


@dataclass(frozen=True)
class JournalEntry:
    """One journaled fact of a run.

    Attributes:
        step: The action invocation (``"<action>@<event index>"``) or ``RUN_STEP``.
        ordinal: Call ordinal within the step (0, 1, ...), ``COMPLETION``,
            ``FAILED_ATTEMPTS`` or ``RUN_END``.
        function_id: What was called (``module:qualname``, ``chat:<model>``,
            ``tool:<name>``), or ``""`` for completions and run ends.
        args_digest: SHA-256 hex of the call's canonical arguments, or ``""``.
        payload: JSON text: the call's result or exception, or the step's
            completion, or its failed attempts (``{"failed": n}``), or the
            run's outcome.
    """

    step: str
    ordinal: int
    function_id: str
    args_digest: str
    payload: str


RunKey = Tuple[str, str, int]  # (journal id, key text, record sequence number)


class JournalStore(ABC):
    """Durable storage of journal entries.

    Implementations must make ``append`` atomic (all entries or none) and
    durable when it returns, and must be safe to use from several processes
    (the Python workers of one job) at once. ``writes`` counts ``append``
    calls that wrote: the runtime's commit count. A failed read or write
    raises one of the store's own errors (``stores.errors``), never a bare
    driver error.
    """

    # Whether a call waits for I/O (a database file or server). The runtime
    # then calls reads on its io pool, never on the event loop's thread that
    # every run of a subtask shares; a store that answers from memory says
    # False and is read in place.
    blocking_io: bool = True

    def __init__(self) -> None:
        self.writes = 0

    @abstractmethod
    def load_run(self, journal_id: str, key: str, seq: int) -> Dict[Tuple[str, int], JournalEntry]:
        """Every entry of one record's run, by (step, ordinal)."""

    @abstractmethod
    def append(self, journal_id: str, key: str, seq: int, entries: List[JournalEntry]) -> None:
        """Write ``entries`` of one run in one transaction (one commit).

        An entry whose (step, ordinal) exists replaces it.

        Raises:
            JournalStoreError: The store's own errors (``stores.errors``),
                naming the operation and the run: ``JournalUnavailableError``
                once the store's retries ran out (the write may or may not
                have landed: appends are idempotent, so a retry is safe), a
                terminal kind otherwise (nothing was written).
            TypeError: An entry's field has the wrong type (the in-memory store).
        """

    @abstractmethod
    def prune(self, finished_before_s: float, journal_id: str) -> int:
        """Delete every entry of ``journal_id``'s runs whose ``RUN_END`` was
        committed before ``finished_before_s`` (Unix seconds), with the
        sub-agent runs nested under them (journal ids
        ``"<journal_id>/<call id>"``). Another journal's runs are never
        touched, whoever shares the store. Returns the entries deleted."""

    def journal_ids(self, limit: int) -> List[str]:
        """Up to ``limit`` journal ids that have a finished run in the store,
        in sorted order (nested sub-agent journals write no run end, so they
        are not among them). For reporting a store that other jobs share;
        a store that cannot tell returns ``[]``."""
        return []

    def runs_without_root_mark(self, journal_id: str, since_s: float, before_s: float, limit: int) -> List[Tuple[str, int]]:
        """Up to ``limit`` runs ``(key text, seq)`` of ``journal_id`` whose
        run end was committed in ``[since_s, before_s)`` (Unix seconds) and
        that hold no ``TRACE_STEP`` entry with function id ``"root"`` (their
        trace's root span was never marked exported: ``runtime.features.tracing``).
        A store that cannot tell returns ``[]``."""
        return []

    @abstractmethod
    def count_entries(self) -> int:
        """How many entries the store holds (for sizing and tests)."""

    def close(self) -> None:
        """Release connections."""
