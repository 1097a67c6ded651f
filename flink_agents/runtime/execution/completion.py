"""A finished record, and the one step that applies it to its key's state.

The scheduler runs a record against a copy of the key's state and gets a
``Completion``; the host core (``runtime.keyed_host``, under the Flink
operator and the local runner alike) applies it with one step
(``apply_completions``): the record
leaves the key's pending queue, the key's short-term memory becomes the
run's, the steering messages the run took leave the key's state, and the
record's outputs and error records are handed back, in order, for the host
to emit. All or nothing per record: a failed record is not applied and
emits nothing; what finished before it is applied and emitted, then the host
raises its failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Set, Tuple

from flink_agents.runtime.errors import job_failure
from flink_agents.runtime.execution.state import KeyState

__all__ = ["Applied", "Completion", "Emission", "apply_completions"]

Emission = Tuple[bool, Any]  # (is an error record, value)


@dataclass
class Completion:
    """A finished record of one key, waiting to be applied.

    Attributes:
        seq: The record's sequence number (the head of the key's pending queue).
        short_term_memory: The key's memory after the run.
        outputs: ``OutputEvent`` outputs, in order (none if the record failed
            or was skipped).
        errors: Error records (``skip`` strategy).
        failure: The exception that failed the record (``fail`` strategy).
        steering_taken_through: The key's highest steering seq taken by its
            runs so far (those messages leave the key's state).
        usage: The key's usage totals with this record's added
            (``KeyState.usage``), None when it reported none.
        budget: The key's budget window with this record added
            (``KeyState.budget``), None when no key budget is set.
        parked: The run ended under the ``park`` strategy: the record stays
            pending and its key is paused (the runner keeps it; never applied).
        keep_failed: ``[journal seq, record, Unix ms]`` of a record that
            ended on the error stream, kept in ``KeyState.failed`` for a
            retry (run control on).
        memory_reads: The memory paths the run read, when a memory TTL
            renewed on reads is set (the host renews them in keyed state).
    """

    seq: int
    short_term_memory: Dict[str, Any]
    outputs: List[Any] = field(default_factory=list)
    errors: List[Dict[str, Any]] = field(default_factory=list)
    failure: BaseException | None = None
    steering_taken_through: int = -1
    usage: Dict[str, Any] | None = None
    budget: Dict[str, Any] | None = None
    parked: BaseException | None = None
    keep_failed: List[Any] | None = None
    memory_reads: Set[str] | None = None


@dataclass
class Applied:
    """What ``apply_completions`` did.

    Attributes:
        emissions: Outputs and error records to emit, in order.
        seqs: The record (sequence number) of each emission.
        failure: The failure of the first failed record, if any: the host
            stores the state, emits ``emissions``, then raises it (the job
            fails; the failed record and those after it stay pending).
    """

    emissions: List[Emission] = field(default_factory=list)
    failure: BaseException | None = None
    seqs: List[int] = field(default_factory=list)

    def raise_failure(self) -> None:
        """Raise ``failure`` if there is one, as the job's failure: an
        internal ``JournalUnavailable`` as the store's own error, an
        ``Exception`` naming store and cause (``errors.job_failure``)."""
        if self.failure is None:
            return
        failure = job_failure(self.failure)
        if failure is self.failure:
            raise failure
        raise failure from self.failure


def apply_completions(key: Any, state: KeyState, completions: Iterable[Completion]) -> Applied:
    """Apply ``completions`` (in order) to ``state``, up to the first failed one.

    The caller stores ``state`` afterwards, emits ``emissions``, then calls
    ``raise_failure()``.

    Raises:
        RuntimeError: A completion is not for the head of the pending queue
            (a runtime bug: records of a key finish in order).
    """
    emissions: List[Emission] = []
    seqs: List[int] = []
    for completion in completions:
        if completion.failure is not None:
            return Applied(emissions, completion.failure, seqs)
        if not state.pending or state.pending[0].seq != completion.seq:
            head = state.pending[0].seq if state.pending else None
            raise RuntimeError(f"key {key!r}: record #{completion.seq} finished, #{head} was expected")
        state.pending.pop(0)
        state.short_term_memory = completion.short_term_memory
        if completion.memory_reads:
            state.memory_reads = (state.memory_reads or set()) | completion.memory_reads
        state.runs_finished += 1
        if completion.usage is not None:
            state.usage = completion.usage
        if completion.budget is not None:
            state.budget = completion.budget
        if state.steering:
            state.steering = [m for m in state.steering if m[0] > completion.steering_taken_through]
        if state.callback_deadlines:  # the run's callbacks are closed now
            state.callback_deadlines = [e for e in state.callback_deadlines if e[2] != completion.seq]
        if completion.keep_failed is not None:
            state.failed.append(completion.keep_failed)
        emissions.extend((False, output) for output in completion.outputs)
        emissions.extend((True, error) for error in completion.errors)
        seqs.extend([completion.seq] * (len(completion.outputs) + len(completion.errors)))
    return Applied(emissions, seqs=seqs)
