"""The callback port: durable callbacks that outside systems complete.

A callback is created by a run (``ctx.create_callback``) and completed at
most once: by the HTTP ingress (resolve or reject, with the POSTed body), or
by the runtime (its deadline passed, the run cancelled it, or the run ended
while it was still pending). The store decides who came first: ``complete``
moves a callback out of ``PENDING`` only if it is still there, in one atomic
statement, so a resolve racing the deadline timer has exactly one winner, in
every process that reads the store afterwards.

A callback is bound to the call that created it, ``CallbackRef`` (journal id,
key, record sequence number, step, ordinal): ``register`` returns the callback
already registered for that ref, so a replayed run gets back the id, deadline
and outcome of the original one.

Resolve and reject are separate capabilities: ``register`` stores two
independent tokens with the callback (``capabilities.new_capability_token``:
192 bits each from ``secrets``; neither can be computed from the other or
from the id), and the ingress completes a callback only for a URL carrying
the token of its route (``CallbackRecord.grants``, compared in constant
time). A
row written by a release before the tokens existed has none
(``CallbackRecord.legacy``): its id alone still grants both routes, as it
did when its URLs were handed out. Rows live beside the journal (the same SQLite
file or PostgreSQL database), so the ingress finds them with the job's
journal configuration alone, and they are pruned with their run's journal.
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from flink_agents.stores.capabilities import new_capability_token
from typing import Dict, Iterable, Optional

__all__ = [
    "ACCEPTED",
    "CANCELLED",
    "CLOSED",
    "CallbackRecord",
    "CallbackRef",
    "CallbackStore",
    "CompleteResult",
    "FINAL_STATES",
    "FINISHED",
    "PENDING",
    "REJECTED",
    "RESOLVED",
    "TIMED_OUT",
    "UNKNOWN",
    "new_capability_token",
]

# States. PENDING is the only one a callback leaves; the rest are final.
PENDING = "pending"
RESOLVED = "resolved"  # the ingress got POST .../resolve; body = the result
REJECTED = "rejected"  # the ingress got POST .../reject; body = the reason
TIMED_OUT = "timed_out"  # the deadline passed first
CANCELLED = "cancelled"  # the run cancelled the wait first
CLOSED = "closed"  # the run ended while the callback was still pending
FINAL_STATES = (RESOLVED, REJECTED, TIMED_OUT, CANCELLED, CLOSED)

# Outcomes of ``complete``.
ACCEPTED = "accepted"  # the callback was pending and now has the new state
FINISHED = "finished"  # it had a final state already: nothing changed
UNKNOWN = "unknown"  # no such callback (never created, or pruned)

@dataclass(frozen=True)
class CallbackRef:
    """The call that created a callback.

    Attributes:
        journal_id: The key's journal namespace (the job that first saw the key).
        key: The key as stable text (``runtime.durability.ids.key_text``).
        seq: The record's sequence number within the key.
        step: The action invocation (``"<action>@<event index>"``), with the
            creating task's branch path (``"/<path>"``) for a callback
            created in a concurrent branch (``runtime.durability.call_position``).
        ordinal: Which callback of that task (0, 1, ... in creation order).
    """

    journal_id: str
    key: str
    seq: int
    step: str
    ordinal: int


@dataclass(frozen=True)
class CallbackRecord:
    """A callback as stored.

    Attributes:
        callback_id: The unguessable id in the URLs (URL-safe text).
        ref: The call that created it.
        purpose: What the run waits for (free text from the action).
        created_ms: Creation time, Unix milliseconds.
        deadline_ms: When it times out, Unix milliseconds.
        state: ``PENDING`` or one of ``FINAL_STATES``.
        body: The POSTed body (``RESOLVED``: the result, ``REJECTED``: the
            reason); None in the other states.
        completed_ms: When it left ``PENDING``, Unix milliseconds, or None.
        late_completions: Resolve/reject POSTs that arrived after it had
            left ``PENDING`` (dropped and counted).
        resolve_token, reject_token: The capability of each route (in its
            URL); None for a row an older release wrote (``legacy``). Never
            in the ``repr``.
        details: What a reviewer of the callback needs to see, as JSON text
            (a tool call's approval: the tool, its call id, its arguments
            with secrets redacted; ``runtime.features.approvals``), or None.
    """

    callback_id: str
    ref: CallbackRef
    purpose: str
    created_ms: int
    deadline_ms: int
    state: str
    body: Optional[bytes] = None
    completed_ms: Optional[int] = None
    late_completions: int = 0
    resolve_token: Optional[str] = field(default=None, repr=False)
    reject_token: Optional[str] = field(default=None, repr=False)
    details: Optional[str] = None

    @property
    def legacy(self) -> bool:
        """Written before the routes had tokens: the id alone grants both."""
        return self.resolve_token is None and self.reject_token is None

    def grants(self, state: str, token: Optional[str]) -> bool:
        """Whether a POST carrying ``token`` may complete this callback as
        ``state`` (``RESOLVED`` or ``REJECTED``): ``token`` is that route's
        token (compared in constant time), or, for a ``legacy`` row only,
        absent."""
        if self.legacy:
            return token is None
        expected = self.resolve_token if state == RESOLVED else self.reject_token if state == REJECTED else None
        if expected is None or token is None:
            return False
        return hmac.compare_digest(expected.encode("ascii"), token.encode("ascii", "replace"))


@dataclass(frozen=True)
class CompleteResult:
    """What ``complete`` did.

    Attributes:
        outcome: ``ACCEPTED``, ``FINISHED`` or ``UNKNOWN``.
        record: The callback after the call (None when ``UNKNOWN``). With
            ``FINISHED`` it shows the state that won.
    """

    outcome: str
    record: Optional[CallbackRecord]


class CallbackStore(ABC):
    """Durable storage of callbacks; safe to share between processes.

    Every method is atomic and durable when it returns (as ``JournalStore.append``).
    """

    @abstractmethod
    def register(
        self, ref: CallbackRef, callback_id: str, purpose: str, created_ms: int, deadline_ms: int,
        resolve_token: Optional[str] = None, reject_token: Optional[str] = None,
        details: Optional[str] = None,
    ) -> CallbackRecord:
        """Store a new ``PENDING`` callback, unless ``ref`` has one already.

        Args:
            resolve_token, reject_token: The routes' capabilities; each one
                not given is drawn here (``new_capability_token``).
            details: ``CallbackRecord.details`` (JSON text), or None.

        Returns:
            The callback registered for ``ref``: the new one, or on a replay
            the original (its id, purpose, deadline and current state win over
            the arguments).

        Raises:
            Exception: The store's own errors (nothing was written).
        """

    @abstractmethod
    def complete(
        self, callback_id: str, state: str, body: Optional[bytes], now_ms: int, count_late: bool = False
    ) -> CompleteResult:
        """Move a ``PENDING`` callback to ``state`` (one of ``FINAL_STATES``)
        with ``body``, in one atomic step.

        Args:
            count_late: If the callback has left ``PENDING`` already, add one
                to its ``late_completions`` (the ingress sets it for POSTs).

        Raises:
            ValueError: ``state`` is not a final state.
        """

    @abstractmethod
    def get_callback(self, callback_id: str) -> Optional[CallbackRecord]:
        """The callback, or None if unknown."""

    @abstractmethod
    def finished_callbacks(self, callback_ids: Iterable[str]) -> Dict[str, CallbackRecord]:
        """Those of ``callback_ids`` that have left ``PENDING``, by id."""

    @abstractmethod
    def close_run(self, journal_id: str, key: str, seq: int, now_ms: int) -> int:
        """Move every ``PENDING`` callback of one record's run (any step) to
        ``CLOSED``. Returns how many it moved."""

    @abstractmethod
    def prune_callbacks(self, finished_before_s: float, journal_id: str) -> int:
        """Delete the callbacks of ``journal_id``'s runs whose journal
        ``RUN_END`` was committed before ``finished_before_s`` (Unix seconds),
        with those of the sub-agent runs nested under them, exactly as
        ``JournalStore.prune`` selects entries (never another journal's);
        call it before that, which deletes the markers.

        A callback lives as long as its run: a run still in progress may be
        replayed and must find its callbacks (ids, outcomes), however long ago
        they finished. Callbacks of a run that never ends (an abandoned job)
        stay, as its journal entries do. Returns how many it deleted."""
