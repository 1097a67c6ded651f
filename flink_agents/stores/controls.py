"""The run-control port: requests to pause, resume, cancel or retry a key's runs.

An operator (the CLI, the web inspector) writes a request; every subtask of
the job reads them on its poll and applies what concerns the keys it runs
(``runtime.features.run_control``). Requests live beside the journal and the
callbacks (the same SQLite file or PostgreSQL database), so a running Flink
job and the local runner are reached the same way, and they outlive a
failover: the store, not the job's memory, says which keys are paused.

Life of one request::

    request_control ──> PENDING ──a subtask applied it──> APPLIED  (outcome says what it did)
                          └──────nothing to do──────────> IGNORED  (outcome says why)

``mark_control`` moves a request out of ``PENDING`` only if it is still
there (one conditional write), so two subtasks never both apply a cancel.
Pause and resume act on every subtask (whichever holds the key); a key is
paused while its latest pause/resume request is a pause (``paused_keys``),
whatever their states.

Nothing read back here picks code: ``action`` is compared against the
four names below and anything else is refused on write and ignored on read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from typing import Iterable, List, Optional, Set, Tuple

__all__ = [
    "ACTIONS",
    "APPLIED",
    "CANCEL",
    "CONTROL_STATES",
    "ControlRequest",
    "ControlStore",
    "IGNORED",
    "InMemoryControls",
    "PAUSE",
    "PENDING",
    "RESUME",
    "RETRY",
    "check_request",
    "paused_from",
]

PAUSE = "pause"  # the key's next records wait (in keyed state) until a resume
RESUME = "resume"  # the key's records run again; a parked record is retried
CANCEL = "cancel"  # the run of (key, seq) ends now, cancelled, on the error stream
RETRY = "retry"  # a parked or failed record of (key, seq) runs again, replaying its committed calls
ACTIONS = (PAUSE, RESUME, CANCEL, RETRY)

PENDING = "pending"
APPLIED = "applied"
IGNORED = "ignored"
CONTROL_STATES = (PENDING, APPLIED, IGNORED)

_MAX_REQUESTED_BY = 200


@dataclass(frozen=True)
class ControlRequest:
    """One run-control request.

    Attributes:
        control_id: Store-assigned, increasing per store (the poll's cursor).
        journal_id: The key's journal namespace (the job that first saw the key).
        key: The key as stable text (``runtime.durability.ids.key_text``).
        action: One of ``ACTIONS``.
        seq: The record (cancel, retry); None for pause and resume, and for a
            cancel of whatever record of the key runs when it is applied.
        requested_ms: When it was written, Unix milliseconds.
        requested_by: Who asked (``cli``, ``ui``, a user name), for the record.
        state: ``PENDING``, ``APPLIED`` or ``IGNORED``.
        applied_ms: When it left ``PENDING``, Unix milliseconds.
        outcome: What applying it did, or why it was ignored.
    """

    control_id: int
    journal_id: str
    key: str
    action: str
    seq: Optional[int]
    requested_ms: int
    requested_by: str
    state: str = PENDING
    applied_ms: Optional[int] = None
    outcome: str = ""


def check_request(action: str, seq: Optional[int], requested_by: str) -> None:
    """Refuse a request no subtask could apply.

    Raises:
        ValueError: ``action`` is not one of ``ACTIONS``; ``seq`` is negative
            or given for pause/resume; ``requested_by`` is empty or over 200
            characters.
    """
    if action not in ACTIONS:
        raise ValueError(f"control action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if seq is not None:
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"control seq must be a record number >= 0, not {seq!r}")
        if action in (PAUSE, RESUME):
            raise ValueError(f"{action} acts on a whole key: give no seq (got {seq})")
    elif action == RETRY:
        raise ValueError("retry needs the record's seq")
    if not requested_by or len(requested_by) > _MAX_REQUESTED_BY:
        raise ValueError(f"requested_by must be 1 to {_MAX_REQUESTED_BY} characters")


def paused_from(requests: Iterable[ControlRequest]) -> Set[Tuple[str, str]]:
    """The (journal id, key) pairs whose latest pause/resume request, by
    ``control_id``, is a pause."""
    latest: dict = {}
    for request in sorted(requests, key=lambda r: r.control_id):
        if request.action in (PAUSE, RESUME):
            latest[(request.journal_id, request.key)] = request.action
    return {pair for pair, action in latest.items() if action == PAUSE}


class ControlStore(ABC):
    """Where run-control requests are kept (mixed into the journal stores)."""

    @abstractmethod
    def request_control(
        self, journal_id: str, key: str, action: str, seq: Optional[int], requested_by: str, now_ms: int,
    ) -> ControlRequest:
        """Store a new ``PENDING`` request and return it with its id.

        Raises:
            ValueError: See ``check_request`` (nothing is written).
            JournalStoreError: The write failed (see ``stores.errors``).
        """

    @abstractmethod
    def controls(
        self, journal_ids: Optional[Iterable[str]] = None, after_id: int = 0, key: Optional[str] = None,
        pending_only: bool = False,
    ) -> List[ControlRequest]:
        """Requests with ``control_id > after_id``, oldest first, of the
        given journals (None: all; sub-agent journals are not included: a
        key is controlled in its own job's journal), of one ``key`` if given,
        only ``PENDING`` ones if ``pending_only``."""

    @abstractmethod
    def mark_control(self, control_id: int, state: str, outcome: str, now_ms: int) -> bool:
        """Move a ``PENDING`` request to ``APPLIED`` or ``IGNORED`` with
        ``outcome``; whether this call did (False: it had left ``PENDING``
        already, or there is no such request).

        Raises:
            ValueError: ``state`` is neither ``APPLIED`` nor ``IGNORED``.
        """

    def paused_keys(self, journal_ids: Optional[Iterable[str]] = None) -> Set[Tuple[str, str]]:
        """The (journal id, key) pairs paused now (``paused_from``)."""
        return paused_from(r for r in self.controls(journal_ids) if r.action in (PAUSE, RESUME))


class InMemoryControls(ControlStore):
    """Mixin: the run-control port in process memory, under ``self._lock``
    (the local runner and tests; nothing survives the process)."""

    def _control_rows(self) -> List[ControlRequest]:
        rows = self.__dict__.get("_controls")
        if rows is None:
            rows = self.__dict__["_controls"] = []
        return rows

    def request_control(
        self, journal_id: str, key: str, action: str, seq: Optional[int], requested_by: str, now_ms: int,
    ) -> ControlRequest:
        check_request(action, seq, requested_by)
        with self._lock:  # type: ignore[attr-defined]
            rows = self._control_rows()
            request = ControlRequest(len(rows) + 1, journal_id, key, action, seq, now_ms, requested_by)
            rows.append(request)
            return request

    def controls(
        self, journal_ids: Optional[Iterable[str]] = None, after_id: int = 0, key: Optional[str] = None,
        pending_only: bool = False,
    ) -> List[ControlRequest]:
        wanted = None if journal_ids is None else set(journal_ids)
        with self._lock:  # type: ignore[attr-defined]
            return [
                r for r in self._control_rows()[after_id:]
                if (wanted is None or r.journal_id in wanted) and (key is None or r.key == key)
                and (not pending_only or r.state == PENDING)
            ]

    def mark_control(self, control_id: int, state: str, outcome: str, now_ms: int) -> bool:
        if state not in (APPLIED, IGNORED):
            raise ValueError(f"a control request leaves pending as {APPLIED!r} or {IGNORED!r}, not {state!r}")
        with self._lock:  # type: ignore[attr-defined]
            rows = self._control_rows()
            if not 1 <= control_id <= len(rows) or rows[control_id - 1].state != PENDING:
                return False
            rows[control_id - 1] = replace(rows[control_id - 1], state=state, outcome=outcome[:2000],
                                           applied_ms=now_ms)
            return True
