"""``RunJournal``: one record's run against the journal store.

Every journaled call of a run goes through ``call``: it returns the journaled
result (or re-raises the journaled exception) if the call is in the journal,
and otherwise runs it and journals the outcome. Entries are buffered and
committed in as few writes as correctness allows:

- before a call that is not in the journal starts, everything buffered is
  committed, so no call runs on a result that a crash could still lose;
- when a call's result lands while other calls of the run are still in
  flight (or waiting for the write before they start), before the call
  returns it, so a completed call is never repeated because a slower
  sibling was in flight at a crash. Group commit: that
  write waits ``GROUP_COMMIT_DELAY_S`` (5 ms) first, and results landing
  meanwhile share it (a crash inside those 5 ms repeats those calls), or,
  if none runs any more by then, the run's next write takes them; a result that lands with nothing
  else in flight waits for the run's next write, which comes before anything
  else runs (the next call, or the run end), so the window is CPU time only;
- at the end of the run, with the run-end marker (not at all for a run
  that made no journaled call: it has nothing to protect).

Every store write of a run is issued here, and only at these commit points
(other modules ask for them by name; ``tests/unit/test_layers.py`` holds it):

1. ``call`` / ``call_sync``: before a call that is not in the journal starts,
   if anything is buffered (``_commit_through``); a call with a reconciler
   buffers its started mark first (``call_started``), so this write always
   happens for it;
2. ``call``: a result that lands while siblings run (group commit, above);
3. ``prepare_retry``: before a failed step runs again (one write, with the
   step's failed-attempts count);
4. ``before_wait``: before the run parks on an outside event (a callback);
5. ``keep_sub_agent_result``: a sub-agent call's result, at once (the
   child's journal ends with its own run end and may be pruned first);
6. ``settle_async``: a nested (sub-agent) run's entries, without a run end;
7. ``finish`` / ``finish_async``: the run end, with what is still buffered;
8. ``keep_failed_run``: a failed record's completed calls and steps, so a
   restart replays them.

So a run InputEvent -> one model call -> OutputEvent commits twice (point 1
before the model call, with the first action's completion; point 7 with the
model's reply and the rest), a run with one sequential tool round four times
(1 before the model, 1 before the tool, 1 before the second model call, 7),
and one with a round of N parallel tool calls between four and N + 3 times,
by how the results land (within 5 ms of each other: 4; each apart: N + 3).
A framework turn (``integrations.frameworks``) journals its model requests
and tool calls through ``call`` the same way: the same counts.

A call with a reconciler (Flink Agents 0.3.1's ``reconciler=``) whose
started mark an earlier process journaled, without an outcome, is not run:
its reconciler is, and what it returns or raises is journaled as the call's
outcome (``call_started``; the reconciler is the one the caller passes now).

Positions ``(step, ordinal)`` follow the program's structure, not timing
(``runtime.durability.call_position``). A replayed call whose function id or argument
digest differs from the journal raises ``NondeterminismError`` naming both.
The first run gets each result through the same codec a replay reads it
with (``decode(encode(result))``), so both see the same value.

Retries (``prepare_retry``) replay what the failed attempt completed: its
successful results, and errors it caught and went on from (committed by a
later call); the error that failed the attempt, still buffered, is dropped
and that call runs again. The retry's write also journals how many attempts
of the step failed (``failed_attempts``), so a run after a crash continues
the count instead of starting the retry budget again: one write per retry,
none on the success path.

A call's body runs as a task of its own (``call_threads.CallExecution``).
When the task awaiting it is cancelled (an action timeout) while the body
waits for a worker thread, which nothing can stop, the execution is kept
for its position and counts as in flight: the retry waits for it
(``settle_in_flight``), and its result is committed with the retry's write
and replayed, so one call never has two executions at once.

The input digest (``runtime.durability.input_digest``): the run's first
write carries the digest of its record on one of its entries, at no extra
write or row; a replay over another record (a job that kept its
``job-identifier`` but got other input at the same key and position) fails
with ``NondeterminismError`` before anything of the journal is used
(``check_input``). Journals written before carry no digest: they replay
unchecked.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import hashlib
import json
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Tuple

from pydantic import BaseModel

from flink_agents._pycompat import add_note
from flink_agents.api.events.event import EVENT_FIELDS_FLAT, Event
from flink_agents.runtime.durability.call_position import call_body, is_under
from flink_agents.runtime.durability.call_started import is_started, started_mark
from flink_agents.runtime.durability.call_threads import CallExecution
from flink_agents.runtime.durability.json_encoders import canonical_json
from flink_agents.runtime.durability import codec
from flink_agents.runtime.durability.codec import decode_outcome, encode_outcome, encode_result
from flink_agents.runtime.errors import JournalUnavailable, NondeterminismError
from flink_agents.runtime.durability.input_digest import call_digest, journaled_input, mismatch, stamp
from flink_agents.runtime.durability.values import encode_value
from flink_agents.stores.journal import (
    COMPLETION, FAILED_ATTEMPTS, RUN_END, RUN_STEP, TRACE_STEP, JournalEntry, JournalStore,
)

__all__ = [
    "GROUP_COMMIT_DELAY_S", "RunJournal", "STEP_ERROR_CHARS", "args_digest", "function_id_of", "step_error", "timed",
]

# How long a result that landed while siblings run waits for theirs before
# it is written (seconds). Short against a model or tool call; long enough
# for a round of quick tools, whose results land within a few loop turns.
GROUP_COMMIT_DELAY_S = 0.005
# A failed step's error message, as journaled for people (``step_error``).
STEP_ERROR_CHARS = 2000

log = logging.getLogger(__name__)

_LINEAGE_WIRE_NAMES = ("upstreamEventId", "upstreamActionName")


def timed(payload: str, started_ns: int, ended_ns: int | None = None) -> str:
    """``payload`` (a JSON object's text) with ``"t": [start, duration]``
    added: when the call or step began (Unix nanoseconds) and how long it
    took (nanoseconds). Journaled with the outcome, so a replay reports the
    first run's times (progress records, traces); readers ignore it."""
    ended = time.time_ns() if ended_ns is None else ended_ns
    return f'{payload[:-1]},"t":[{started_ns},{max(0, ended - started_ns)}]}}'


def _canonical(value: Any) -> Any:
    """A JSON form of call arguments for digests; objects without one count by
    type only (their identity would make the digest differ on every replay)."""
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, Event):
        # The flat form this digest had before events took 0.3.1's nested
        # JSON form and HEAD's lineage: a run journaled by an earlier
        # release still replays after an upgrade.
        data = value.model_dump(mode="json", context={EVENT_FIELDS_FLAT: True})
        for name in _LINEAGE_WIRE_NAMES:
            data.pop(name, None)
        return data
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    try:
        return encode_value(value)
    except TypeError:
        return f"<{type(value).__module__}.{type(value).__qualname__}>"


def _legacy_digest(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """The digest earlier releases journaled: dict keys as text, tuples as
    lists, objects without a JSON form by type only."""
    text = canonical_json(_canonical([list(args), kwargs]))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _typed(value: Any) -> Any:
    """``value`` in the typed codec's form (``{1: 2}`` is not ``{"1": 2}``, a
    tuple not a list), or, where the codec refuses it, the earlier form."""
    try:
        return codec.encode(value, "argument")
    except TypeError:
        return {"$untyped": _canonical(value)}


class ArgsDigest(str):
    """SHA-256 hex of the typed canonical JSON of a call's arguments; a
    replay also accepts the digest an earlier release journaled for them
    (``legacy``), so journals written before stay replayable."""


    def __new__(cls, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> "ArgsDigest":
        data = [[_typed(a) for a in args], {k: _typed(v) for k, v in kwargs.items()}]
        text = canonical_json(data)
        digest = super().__new__(cls, hashlib.sha256(text.encode("utf-8")).hexdigest())
        digest._args, digest._kwargs = args, kwargs  # for legacy(), only on a mismatch
        return digest

    def legacy(self) -> str:
        """The earlier release's digest of the same arguments."""
        return _legacy_digest(self._args, self._kwargs)


def args_digest(*args: Any, **kwargs: Any) -> ArgsDigest:
    """The digest of ``(args, kwargs)`` a replay is checked against."""
    return ArgsDigest(args, kwargs)


def _matches(entry: JournalEntry, digest: str) -> bool:
    """Whether ``entry`` was journaled for arguments with ``digest``: the
    same digest, or, for an entry an earlier release wrote (its payload has
    no codec mark), the earlier digest of the same arguments."""
    journaled = call_digest(entry)
    if journaled == digest:
        return True
    legacy = getattr(digest, "legacy", None)
    written_before = not entry.payload.startswith('{"c":')
    return legacy is not None and written_before and journaled == legacy()


def function_id_of(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of ``fn``."""
    fn = getattr(fn, "__func__", fn)
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


class RunJournal:
    """The journal of one record's run (see the module docstring).

    Args:
        store: Where entries go.
        journal_id: The key's journal namespace (kept in its keyed state).
        key_text: The key as text.
        seq: The record's sequence number.
        on_write: Called after each committed write (for counters).
        on_commit: Called with the entries of each committed write, after it
            landed (the progress stream, ``runtime.features.progress``).
        executors: Where async writes run (the engine's io pool,
            ``runtime.scheduling.executors``); None: the loop's default executor.
        input_digest: Gives the ``input_digest`` of the run's record, asked
            for at the run's first write (stamped on one of its entries) and by
            ``check_input``; None: a run without a record of its own (a
            sub-agent's nested run), neither stamped nor checked.
    """

    def __init__(
        self, store: JournalStore, journal_id: str, key_text: str, seq: int, on_write: Callable[[], None],
        on_commit: Callable[[List[JournalEntry]], None] | None = None,
        executors: Any = None,
        journaled: Dict[Tuple[str, int], JournalEntry] | None = None,
        input_digest: Callable[[], str] | None = None,
    ) -> None:
        self._store = store
        self._executors = executors
        self._run = (journal_id, key_text, seq)
        self._on_write = on_write
        self._on_commit = on_commit
        self._journaled: Dict[Tuple[str, int], JournalEntry] = (
            store.load_run(journal_id, key_text, seq) if journaled is None else journaled
        )
        # Marks of spans an earlier attempt exported (runtime.features.tracing):
        # kept apart, they are no fact of the run.
        self.trace_marks: List[JournalEntry] = [
            self._journaled.pop(position) for position in [p for p in self._journaled if p[0] == TRACE_STEP]
        ]
        self.started_ns = time.time_ns()  # when this attempt of the run opened its journal
        # The entries of a run that ended without a write (it journaled no
        # call): what it did, for a trace, though nothing was kept.
        self._unwritten: List[JournalEntry] = []
        # Step completions buffered as values, by id of their placeholder
        # entry in the buffer: encoded to JSON only when they are written
        # (or read), since most runs without a call never write them.
        self._unencoded: Dict[int, Tuple[JournalEntry, Dict[str, Any], int | None, int]] = {}
        self._input_digest = input_digest
        # The first write stamps one of its entries with the input digest.
        self._stamp_input = input_digest is not None and not self._journaled
        self._buffer: List[JournalEntry] = []
        self._buffered_errors: set[Tuple[str, int]] = set()  # positions in the buffer holding an exception
        self._in_flight = 0  # calls of this run running now (cut-off executions included)
        self._starting = 0  # calls of this run waiting for the write before they start
        # Executions whose awaiting task was cancelled while they ran (a timeout),
        # by position: running on (a worker thread), or ended and not yet taken.
        self._cut_off: Dict[Tuple[str, int], Tuple["asyncio.Task[Any]", str, str, int]] = {}
        self._settled: List["asyncio.Future[None]"] = []  # waiting for _in_flight == 0
        # Set when a write failed: no further call may start, since what it
        # would build on is not durable (concurrent calls of a step see this).
        self._write_failure: BaseException | None = None
        self._lock: asyncio.Lock | None = None  # made at the first commit: most runs never commit
        self.calls_executed = 0
        self.calls_replayed = 0
        self.calls_reconciled = 0
        # Positions of calls with a reconciler that this process ran (their
        # started mark written or found): a retry runs such a call again, as
        # any failed call, instead of asking its reconciler (``_reconciling``).
        self._ran_here: set[Tuple[str, int]] = set()

    @classmethod
    async def open(
        cls, store: JournalStore, journal_id: str, key_text: str, seq: int, on_write: Callable[[], None],
        on_commit: Callable[[List[JournalEntry]], None] | None = None,
        executors: Any = None,
        input_digest: Callable[[], str] | None = None,
    ) -> "RunJournal":
        """The run's journal, its entries read on the io pool (``executors``),
        not on the loop's thread, when the store's reads wait for I/O
        (``JournalStore.blocking_io``): a read waits for the database (and
        rides out an outage for up to ``journal.retry.timeout_s``), and every
        other run of the subtask would wait with it.

        Raises:
            JournalStoreError: The store could not read the run (its own
                error types, ``flink_agents.stores``).
        """
        if not store.blocking_io:
            journaled = store.load_run(journal_id, key_text, seq)
        elif executors is None:
            journaled = await asyncio.to_thread(store.load_run, journal_id, key_text, seq)
        else:
            journaled = await executors.io(store.load_run, journal_id, key_text, seq)
        return cls(store, journal_id, key_text, seq, on_write, on_commit, executors, journaled, input_digest)

    def journaled_entries(self) -> List[JournalEntry]:
        """The entries this run's journal holds (loaded and committed)."""
        return list(self._journaled.values())

    def entries_so_far(self) -> List[JournalEntry]:
        """The entries this run holds now: loaded, committed and buffered
        (not yet written), one per position."""
        entries = dict(self._journaled)
        for entry in self._encoded(self._buffer, keep=True):
            entries[(entry.step, entry.ordinal)] = entry
        return list(entries.values())

    @property
    def unwritten(self) -> List[JournalEntry]:
        """What a run that ended without a write buffered (its step
        completions), for its trace; empty otherwise."""
        if self._unencoded:
            self._unwritten = self._encoded(self._unwritten)
        return self._unwritten

    def _encoded(self, entries: List[JournalEntry], keep: bool = False) -> List[JournalEntry]:
        """``entries`` with buffered step completions encoded (``complete``);
        ``keep``: leave them buffered as values too."""
        if not self._unencoded:
            return entries
        out = []
        for entry in entries:
            pending = self._unencoded.get(id(entry)) if entry.ordinal == COMPLETION else None
            if pending is not None and pending[0] is entry:
                if not keep:
                    del self._unencoded[id(entry)]
                _, completion, started_ns, ended_ns = pending
                payload = codec.json_text(completion)
                entry = JournalEntry(entry.step, COMPLETION, "", "",
                                     payload if started_ns is None else timed(payload, started_ns, ended_ns))
            out.append(entry)
        return out

    def holds(self, step: str, ordinal: int) -> bool:
        """Whether the call at ``(step, ordinal)`` has an outcome already
        (journaled, or kept from an execution cut off by a timeout): calling
        it replays, it does not run. A started mark is no outcome."""
        entry = self._journaled.get((step, ordinal))
        return (entry is not None and not is_started(entry)) or (step, ordinal) in self._cut_off

    @property
    def is_finished(self) -> bool:
        """Whether the journal holds the run's end (a replay of a finished run)."""
        return (RUN_STEP, RUN_END) in self._journaled

    @property
    def is_replay(self) -> bool:
        """Whether the journal already held entries of this run."""
        return bool(self._journaled)

    def check_input(self, key: Any) -> None:
        """Before a replay uses anything of the journal: the journal must
        have been written for this run's record.

        Raises:
            NondeterminismError: The journal carries the input digest of
                another record; names the key, the record's sequence number
                and both digests. A journal without one (written by an
                earlier release) passes unchecked.
        """
        if self._input_digest is None or not self._journaled:
            return
        journaled = journaled_input(self._journaled.values())
        if journaled is None:
            return
        current = self._input_digest()
        if journaled != current:
            raise mismatch(key, self._run[2], self._run[0], journaled, current)

    def _commit_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    def _take(self) -> List[JournalEntry]:
        if self._write_failure is not None:
            raise self._write_failure
        entries, self._buffer = self._encoded(self._buffer), []
        self._buffered_errors.clear()
        if self._stamp_input and entries:
            assert self._input_digest is not None  # _stamp_input implies it
            # Not on a started mark (the call's outcome replaces it): a write
            # of marks only leaves the stamp to the run's next write.
            self._stamp_input = not stamp(entries, self._input_digest(), skip=is_started)
        return entries

    def _landed(self, entries: List[JournalEntry]) -> None:
        for entry in entries:
            self._journaled[(entry.step, entry.ordinal)] = entry
        self._on_write()
        if self._on_commit is not None:
            self._on_commit(entries)  # the progress stream: published after the write landed

    def _commit(self) -> None:
        """Write everything buffered in one transaction (no-op if nothing is).

        Like ``_commit_async``, it first waits until a write of this run still
        in flight (an orphaned call's commit, say) returned: a run's writes
        land in the order they took their entries. The wait blocks the calling
        thread as the write itself does; that write runs on a worker thread
        and needs no event loop.
        """
        self._wait_for_write_in_flight()
        entries = self._take()
        if entries:
            self._write_now(entries)

    def _write_now(self, entries: List[JournalEntry]) -> None:
        """Write ``entries`` on this thread and land them.

        Raises:
            BaseException: The write failed (``JournalUnavailable``, recorded
                as the run's write failure) or its bookkeeping did.
        """
        try:
            self._store.append(*self._run, entries)
        except BaseException as exc:
            self._write_failure = self._unavailable(exc)
            raise self._write_failure from exc
        self._landed(entries)

    async def _commit_async(self) -> None:
        """``_commit`` with the store write on a worker thread, so the event loop
        runs other keys while the store syncs to disk. Commits of one run are
        serialized: a call started meanwhile waits until the write landed.

        Cancellation-safe: once entries are taken from the buffer, their write
        and its bookkeeping (``_landed``, or recording the write failure)
        happen together, whatever becomes of the awaiting task, and the commit
        lock is held until they did. A cancellation that arrives meanwhile
        takes effect when the write settled: a cancelled caller sees its
        ``CancelledError`` only once journal and store agree again. Cancelled
        while it waits for the lock, it took nothing: the entries stay buffered.
        """
        async with self._commit_lock():
            entries = self._take()
            if not entries:
                return
            await self._write(entries)

    async def _commit_through(self, last: JournalEntry | None) -> None:
        """Make durable what was buffered up to ``last`` (None: nothing, but
        a write in flight must land): the commit before a call starts.

        A sibling's result that landed while this call waited for the lock
        is left to its own (group) commit: this call does not depend on it.
        """
        async with self._commit_lock():
            if last is None or not any(entry is last for entry in self._buffer):
                if self._write_failure is not None:
                    raise self._write_failure
                return
            entries = self._take()
            await self._write(entries)

    # The store write of the latest ``_commit_async`` (a thread-side future), so
    # that ``commit``, which cannot await the commit lock, waits for it too.
    _write_in_flight: Any = None

    def _wait_for_write_in_flight(self) -> None:
        """Block until the latest async write of this run returned.

        Raises:
            BaseException: That write failed (nothing may be written after it).
        """
        pending = self._write_in_flight
        if pending is None:
            return
        error = pending.exception()
        if error is not None:
            self._write_failure = self._unavailable(error)
            raise self._write_failure from error

    async def _write(self, entries: List[JournalEntry]) -> None:
        """Write ``entries`` taken from the buffer, under the commit lock.

        A store answering from memory writes in place, and lands at once:
        a worker thread's hop (submit, wake, GIL hand-over, the loop's
        self-pipe) and a loop round cost more CPU than the write. The
        commit then has no suspension point: no cancellation can arrive
        between the write and its bookkeeping.

        Raises:
            BaseException: The write failed (``JournalUnavailable``, then the
                run's write failure) or its bookkeeping did.
        """
        if self._store.blocking_io:
            await self._settled_despite_cancellation(self._write_in_thread(entries))
            return
        self._write_in_flight = None  # nothing of this run is in flight now
        self._write_now(entries)

    def _write_in_thread(self, entries: List[JournalEntry]) -> "asyncio.Future[None]":
        """Start the store write of ``entries`` on a worker thread.

        Returns:
            A future that is done once the write returned *and* its
            bookkeeping ran on the event loop; it fails with the write's
            error (then recorded as the write failure) or the bookkeeping's.
            No task awaits it directly, so no cancellation reaches it: the
            bookkeeping runs even if every task waiting for it is cancelled.
        """
        loop = asyncio.get_running_loop()
        written: "concurrent.futures.Future[None]" = concurrent.futures.Future()
        settled: "asyncio.Future[None]" = loop.create_future()
        self._write_in_flight = written

        def write() -> None:  # on the worker thread
            try:
                self._store.append(*self._run, entries)
            except BaseException as exc:
                written.set_exception(exc)
            else:
                written.set_result(None)

        def land(done: "asyncio.Future[None] | concurrent.futures.Future[None]") -> None:  # on the event loop
            try:
                done.result()
            except BaseException as exc:
                self._write_failure = self._unavailable(exc)
                settled.set_exception(self._write_failure)
                return
            try:
                self._landed(entries)
            except BaseException as exc:
                settled.set_exception(exc)
            else:
                settled.set_result(None)

        asyncio.wrap_future(written, loop=loop).add_done_callback(land)
        try:
            if self._executors is not None:
                self._executors.io_submit(write)  # ``written`` wakes the loop: one hand-over back, not two
            else:
                loop.run_in_executor(None, contextvars.copy_context().run, write)
        except BaseException as exc:  # no worker thread (the executor shut down): nothing written
            written.set_exception(exc)
        return settled

    async def _settled_despite_cancellation(self, settled: "asyncio.Future[None]") -> None:
        """Await ``settled``; a cancellation of the caller meanwhile is held
        back until it is done, then re-raised. (A write that failed meanwhile
        is recorded as the write failure: the run's next call raises it.)"""
        if settled.done():  # written in place (a store answering from memory)
            settled.result()
            return
        cancelled: asyncio.CancelledError | None = None
        while not settled.done():
            try:
                await asyncio.wait([settled])
            except asyncio.CancelledError as exc:
                cancelled = exc
        if cancelled is not None:
            if not settled.cancelled() and settled.exception() is not None:
                log.warning("journal write of run %s settled with %r after its caller was cancelled",
                            self._run, settled.exception())
            raise cancelled
        settled.result()

    def _unavailable(self, error: BaseException) -> BaseException:
        """A store's error as the runtime's internal ``JournalUnavailable``
        (``runtime.errors``); other ``BaseException``s (a simulated crash,
        a cancellation) as they are."""
        if isinstance(error, Exception):
            failure = JournalUnavailable(self._run, error, repr(self._store))
            failure.__cause__ = error
            return failure
        return error

    def _replay(self, step: str, ordinal: int, function_id: str, digest: str) -> JournalEntry | None:
        entry = self._journaled.get((step, ordinal))
        if entry is None:
            return None
        if entry.function_id != function_id or not _matches(entry, digest):
            raise NondeterminismError(
                f"step {step!r} call #{ordinal} replays differently: the journal has "
                f"{entry.function_id} (args {call_digest(entry)[:12]}), the action now calls "
                f"{function_id} (args {digest[:12]}); the action is not deterministic"
            )
        if is_started(entry):
            return None  # the call began and its outcome was not journaled (``_reconciling``)
        self.calls_replayed += 1
        return entry

    def _reconciling(self, step: str, ordinal: int, reconcile: Callable[..., Any] | None) -> bool:
        """Whether the call at ``(step, ordinal)`` is to be reconciled, not
        run: it has a reconciler, and an earlier process journaled its
        started mark and no outcome (``call_started``). A call this process
        ran itself (it failed, and its step is retried) runs again."""
        entry = self._journaled.get((step, ordinal))
        return (reconcile is not None and entry is not None and is_started(entry)
                and (step, ordinal) not in self._ran_here)

    def _mark_started(
        self, step: str, ordinal: int, function_id: str, digest: str, reconcile: Callable[..., Any] | None,
    ) -> None:
        """Before a call with a reconciler runs: buffer its started mark,
        for the commit before the call to make durable (unless journaled
        already: an earlier attempt of this process wrote it)."""
        if reconcile is None:
            return
        self._ran_here.add((step, ordinal))
        if (step, ordinal) not in self._journaled:
            self._buffer.append(started_mark(step, ordinal, function_id, digest))

    def _reconciled(
        self, step: str, ordinal: int, function_id: str, digest: str, started_ns: int,
        result: Any = None, error: Exception | None = None,
    ) -> Any:
        """Buffer a reconciler's outcome as the call's outcome (0.3.1: a
        replay then returns or raises it without asking again); returns the
        result, or the exception to raise, noted with the call it stands for.

        Raises:
            TypeError: The reconciler's result cannot be journaled (names the call).
        """
        name = _call_name(function_id, step, ordinal)
        if error is not None:
            add_note(error, f"raised by the reconciler of durable call {name}: the call began before a "
                            "failover and its outcome was not journaled, so its reconciler was asked for it")
            return self._buffer_error(step, ordinal, function_id, digest, error, started_ns)
        try:
            return self._buffer_result(step, ordinal, function_id, digest, result, started_ns)
        except TypeError as exc:
            raise TypeError(f"the reconciler of durable call {name}: {exc}") from None

    def record(self, step: str, ordinal: int, function_id: str, produce: Callable[[], Any]) -> Any:
        """Replay or journal a value the run takes from its own host (steering
        messages), without a commit before it: nothing outside depends on
        it yet, so it commits with the run's next write."""
        entry = self._replay(step, ordinal, function_id, "")
        if entry is not None:
            return decode_outcome(entry.payload)
        now = time.time_ns()
        value = produce()
        self._buffer.append(JournalEntry(
            step, ordinal, function_id, "", timed(encode_outcome(value, call=_call_name(function_id, step, ordinal)), now)))
        return value

    def call_sync(
        self, step: str, ordinal: int, function_id: str, digest: str, run: Callable[[], Any],
        reconcile: Callable[[], Any] | None = None,
    ) -> Any:
        """Replay or run a synchronous call.

        Args:
            reconcile: The call's reconciler (Flink Agents 0.3.1's
                ``reconciler=``, as the action passes it now). Given, the
                call's started mark is committed before it runs
                (``call_started``); a replay that finds the mark and no
                outcome calls ``reconcile()`` instead of ``run()`` and
                journals what it returns or raises as the call's outcome.

        Raises:
            BaseException: What ``run`` (or ``reconcile``, noted with the
                call) raised, as a replay will raise it.
            NondeterminismError: The journal holds another call here.
        """
        entry = self._replay(step, ordinal, function_id, digest)
        if entry is not None:
            return decode_outcome(entry.payload)
        if self._reconciling(step, ordinal, reconcile):
            assert reconcile is not None  # _reconciling implies it
            self.calls_reconciled += 1
            started_ns = time.time_ns()
            try:
                with call_body():
                    result = reconcile()
            except Exception as exc:
                raise self._reconciled(step, ordinal, function_id, digest, started_ns, error=exc) from None
            return self._reconciled(step, ordinal, function_id, digest, started_ns, result)
        self._mark_started(step, ordinal, function_id, digest, reconcile)
        self._commit()
        self.calls_executed += 1
        started_ns = time.time_ns()
        try:
            with call_body():
                result = run()
        except Exception as exc:
            raise self._buffer_error(step, ordinal, function_id, digest, exc, started_ns) from None
        return self._buffer_result(step, ordinal, function_id, digest, result, started_ns)

    async def call(
        self, step: str, ordinal: int, function_id: str, digest: str, run: Callable[[], Awaitable[Any]],
        alive: Callable[[], bool] = lambda: True, reconcile: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        """Replay or run an asynchronous call.

        Args:
            alive: Whether the calling action's attempt still runs. A call
                may not start once it ended (an orphan of a failed
                ``gather`` going on): ``RuntimeError``. A call that started
                while it ran and completes after it (that orphan's call in
                flight) is journaled all the same: its position is the
                attempt's, and a retry replays it (``settle_in_flight``);
                its failure is not (it failed nothing the action saw).
                Cancelled while the body runs on a worker thread, the call
                raises the cancellation at once and the thread's outcome is
                kept for the position (``_cut``).
            reconcile: The call's reconciler, as for ``call_sync``; it runs
                as the call's body would (a task of its own, in flight).

        Raises:
            RuntimeError: The action's attempt has ended.
        """
        entry = self._replay(step, ordinal, function_id, digest)
        if entry is not None:
            return decode_outcome(entry.payload)
        if (step, ordinal) in self._cut_off:
            taken = await self._take_cut_off(step, ordinal, function_id, digest)
            if taken is not None:
                return taken[0]
        if not alive():
            raise RuntimeError(f"call {_call_name(function_id, step, ordinal)} started after its action ended")
        reconciling = self._reconciling(step, ordinal, reconcile)
        # From here this call counts as starting: a sibling's result landing
        # while it waits for the write before it is committed at once
        # (below), not left for the run's next write, which would come only
        # after this call ran (a crash inside it would repeat the sibling's).
        self._starting += 1
        try:
            if reconciling:
                assert reconcile is not None  # _reconciling implies it
                run = reconcile  # it reads the outside system: nothing buffered needs to be durable first
                await self._commit_through(None)
                self.calls_reconciled += 1
            else:
                self._mark_started(step, ordinal, function_id, digest, reconcile)
                await self._commit_through(self._buffer[-1] if self._buffer else None)
                self.calls_executed += 1
        finally:
            self._starting -= 1
        self._call_started()
        started_ns = time.time_ns()
        # The body runs as a task of its own, so that one still running on a
        # worker thread when this task is cancelled stays tracked (call_threads).
        execution = CallExecution()
        with call_body():
            body = execution.start(run)
        try:
            result = await asyncio.shield(body)
        except asyncio.CancelledError:
            if body.cancelled():  # the body's own cancellation
                self._call_ended()
                raise
            await self._cut((step, ordinal), (body, function_id, str(digest), started_ns), execution)  # this task was cancelled
            raise
        except Exception as exc:
            self._call_ended()
            if reconciling and alive():
                raise self._reconciled(step, ordinal, function_id, digest, started_ns, error=exc) from None
            if alive():
                raise self._buffer_error(step, ordinal, function_id, digest, exc, started_ns) from None
            raise
        except BaseException:
            self._call_ended()
            raise
        self._call_ended()
        if reconciling:
            value = self._reconciled(step, ordinal, function_id, digest, started_ns, result)
        else:
            value = self._buffer_result(step, ordinal, function_id, digest, result, started_ns)
        if self._in_flight or self._starting:
            # Siblings still run: make this result durable before it is used,
            # so a crash while they run does not repeat this call. After a
            # short delay: siblings landing meanwhile (a parallel round of
            # quick tools) join this write (group commit, as PostgreSQL's
            # commit_delay). Nothing waits for it but the gather it is in. If
            # by then no sibling runs, the run's next write takes them all,
            # as for a result landing alone.
            await asyncio.sleep(GROUP_COMMIT_DELAY_S)
            if self._in_flight or self._starting:
                await self._commit_async()
        return value

    async def _cut(
        self, position: Tuple[str, int], cut: Tuple["asyncio.Task[Any]", str, str, int], execution: CallExecution,
    ) -> None:
        """The task awaiting ``body`` was cancelled while it ran: cancel the
        body and wait until it ended, or until a thread of it outlived the
        cancellation (then it ends when the thread returns). Either way it is
        kept for the position: a retry's call there waits for it and takes
        its result (``_take_cut_off``); it counts as in flight until it ended."""
        body = cut[0]
        if not body.done():
            body.cancel()
        self._cut_off[position] = cut
        body.add_done_callback(self._cut_off_ended)
        while not (body.done() or execution.outlived.done()):
            try:
                await asyncio.wait([body, execution.outlived], return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                continue  # this task is being cancelled already: it re-raises once the body let go

    def _cut_off_ended(self, body: "asyncio.Task[Any]") -> None:
        if not body.cancelled() and body.exception() is not None:
            log.info("a call of run %s cut off by a cancellation failed afterwards (not journaled): %r",
                     self._run, body.exception())
        self._call_ended()

    async def _take_cut_off(self, step: str, ordinal: int, function_id: str, digest: str) -> Tuple[Any] | None:
        """The call at ``(step, ordinal)`` was cut off earlier in this run
        (its attempt timed out): wait until that execution ended (never two
        executions of one call at once) and take its result as this call's,
        journaled as it would have been; None if it failed or was cancelled
        (the call runs again). Cancelled while waiting, it stays kept."""
        cut = self._cut_off.pop((step, ordinal))
        body = cut[0]
        try:
            while not body.done():
                await asyncio.wait([body])
        except asyncio.CancelledError:
            self._cut_off.setdefault((step, ordinal), cut)
            raise
        if body.cancelled() or body.exception() is not None:
            return None
        return (self._buffer_result(step, ordinal, function_id, digest, body.result(), cut[3]),)

    def _cut_off_settled(self, step: str) -> None:
        """Before a retry of ``step`` (its calls settled): buffer the results
        of its cut-off executions, so the retry's write makes them durable
        and the retry replays them; forget those that failed or were
        cancelled (those calls run again). A result the codec refuses stays
        for the retry's call, which raises the refusal (``_take_cut_off``)."""
        for position, (body, function_id, digest, started_ns) in list(self._cut_off.items()):
            if not is_under(position[0], step) or not body.done():
                continue
            if not body.cancelled() and body.exception() is None:
                try:
                    self._buffer_result(*position, function_id, digest, body.result(), started_ns)
                except TypeError:
                    continue
            del self._cut_off[position]

    def _call_started(self) -> None:
        self._in_flight += 1

    def _call_ended(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            waiters, self._settled = self._settled, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def settle_in_flight(self) -> None:
        """Wait until no call of this run is running (a failed attempt's
        orphans finished, their results journaled)."""
        while self._in_flight:
            waiter = asyncio.get_running_loop().create_future()
            self._settled.append(waiter)
            await waiter

    def _buffer_result(
        self, step: str, ordinal: int, function_id: str, digest: str, result: Any, started_ns: int,
    ) -> Any:
        """Buffer a call's result (with its times, ``timed``); returns it as
        a replay will read it.

        Raises:
            TypeError: The result cannot be journaled faithfully (names the call).
        """
        payload, as_replayed = encode_result(result, call=_call_name(function_id, step, ordinal))
        self._buffer.append(JournalEntry(step, ordinal, function_id, str(digest), timed(payload, started_ns)))
        return as_replayed

    def _buffer_error(
        self, step: str, ordinal: int, function_id: str, digest: str, error: Exception, started_ns: int,
    ) -> BaseException:
        """Buffer the exception a call raised; returns the exception to raise
        in its place: the one a replay will raise (same type, ``args``,
        ``str()`` and the attributes the codec keeps), with the original's
        traceback, so the first run cannot rely on what a replay lacks.

        Raises:
            TypeError: The exception cannot be rebuilt as itself on replay
                (names the call; raised from ``error``).
        """
        payload = encode_outcome(error=error, call=_call_name(function_id, step, ordinal))
        self._buffer.append(JournalEntry(step, ordinal, function_id, str(digest), timed(payload, started_ns)))
        self._buffered_errors.add((step, ordinal))
        try:
            decode_outcome(payload)
        except BaseException as rebuilt:
            return rebuilt.with_traceback(error.__traceback__)
        return error  # not reached: an error payload always decodes to an exception

    def completion(self, step: str) -> Dict[str, Any] | None:
        """The journaled completion of ``step`` (events, memory writes), if any."""
        entry = self._journaled.get((step, COMPLETION))
        return None if entry is None else json.loads(entry.payload)

    def complete(self, step: str, completion: Dict[str, Any], started_ns: int | None = None) -> None:
        """Buffer ``step``'s completion (committed with the next write), with
        the step's times when ``started_ns`` (Unix ns) is given (``timed``)."""
        placeholder = JournalEntry(step, COMPLETION, "", "", "")
        self._unencoded[id(placeholder)] = (placeholder, completion, started_ns, time.time_ns())
        self._buffer.append(placeholder)

    def discard_failed(self, step: str) -> None:
        """Forget the uncommitted errors of a failed ``step`` (and its
        branches): the calls that failed it run again on a restart. Its
        completed calls stay buffered and are kept by the next write."""
        dropped = {p for p in self._buffered_errors if is_under(p[0], step)}
        if dropped:
            self._buffer = [e for e in self._buffer if (e.step, e.ordinal) not in dropped]
            self._buffered_errors -= dropped

    def failed_attempts(self, step: str) -> int:
        """How many attempts of ``step`` failed and were retried, as journaled
        (by this run, or by one a crash cut off); 0 when none was."""
        entry = self._journaled.get((step, FAILED_ATTEMPTS))
        return 0 if entry is None else int(json.loads(entry.payload)["failed"])

    async def prepare_retry(self, step: str, failed_attempts: int, error: BaseException | None = None) -> None:
        """Before ``step`` runs again: drop its uncommitted errors
        (``discard_failed``) and commit what its attempt completed together
        with ``failed_attempts`` (how many attempts of the step failed so
        far, 1-based) and the last attempt's ``error`` (``step_error``), so
        the next attempt replays those results instead of calling again, a
        run after a crash continues the count, and an operator sees why.
        Always one write."""
        self.discard_failed(step)
        self._cut_off_settled(step)
        marker: Dict[str, Any] = {"failed": failed_attempts}
        if error is not None:
            marker["error"] = step_error(error)
        self._buffer.append(JournalEntry(step, FAILED_ATTEMPTS, "", "", json.dumps(marker)))
        await self._commit_async()

    async def before_wait(self) -> None:
        """Commit point 4: make everything journaled so far durable before
        the run parks on an outside event (a callback), which may take
        hours; a crash meanwhile then replays all of it."""
        await self._commit_async()

    async def keep_sub_agent_result(self) -> None:
        """Commit point 5: journal a sub-agent call's result now (its
        child's journal ends with its own run end and may be pruned before
        this run ends)."""
        await self._commit_async()

    def keep_failed_run(self) -> None:
        """Commit point 8: keep what a failed record completed (its calls
        and steps), so a restart replays it instead of calling again; the
        error that failed it was dropped by the error policy.

        Raises:
            BaseException: The store write failed (``JournalUnavailable``).
        """
        self._commit()

    async def settle_async(self) -> None:
        """Commit a nested (sub-agent) run's entries without a run end: it is
        pruned with its parent's run (``stores/_sql.PRUNE``)."""
        if not self._journaled and self.calls_executed == 0:
            self._buffer.clear()
            return
        await self._commit_async()

    async def finish_async(self, outcome: str, force: bool = False, detail: Dict[str, Any] | None = None) -> None:
        """``finish`` with the commit on a worker thread; ``force`` writes the
        run end even for a run without journaled calls (one that created
        callbacks: they are pruned by it); ``detail`` goes into the run end
        beside the outcome (a cancel's request: ``finished_detail``)."""
        if self._prepare_finish(outcome, force, detail):
            await self._commit_async()

    @property
    def ends_unwritten(self) -> bool:
        """Whether the run's end writes nothing unless forced: it made no
        journaled call and found nothing journaled (``finish``). The engine
        then ends it with ``finish_unwritten``, without a coroutine."""
        return not self._journaled and self.calls_executed == 0

    def finish_unwritten(self) -> None:
        """End a run that writes nothing (``ends_unwritten``): what it
        buffered is kept for its trace (``unwritten``)."""
        if not self.ends_unwritten:
            raise RuntimeError(f"run {self._run} has entries to write: end it with finish_async")
        self._prepare_finish("ok")

    def reopen(self) -> None:
        """A retried run (``runs retry`` of a record that ended on the error
        stream): its steps replay as journaled, and its run end is written
        anew when it ends (the same slot: the old one is replaced)."""
        self._journaled.pop((RUN_STEP, RUN_END), None)

    @property
    def finished_detail(self) -> Dict[str, Any]:
        """The journaled run end's payload (``{"outcome": ..., ...}``), {}
        when the run has none or it does not read as a JSON object (data read
        back: the caller compares its values, never runs them)."""
        entry = self._journaled.get((RUN_STEP, RUN_END))
        if entry is None:
            return {}
        try:
            payload = json.loads(entry.payload)
        except ValueError:
            return {}
        return payload if isinstance(payload, dict) else {}

    def finish(self, outcome: str) -> None:
        """Mark the run finished (``"ok"`` or ``"skipped"``) and commit.

        A run that made no journaled call and found nothing journaled writes
        nothing: it had no effect outside Flink's state, so running it again
        after a restore is exactly Flink's own replay, and its completions
        would only cost a write per record.
        """
        if self._prepare_finish(outcome):
            self._commit()

    def _prepare_finish(self, outcome: str, force: bool = False, detail: Dict[str, Any] | None = None) -> bool:
        """Buffer the run end; whether there is anything to commit."""
        if not force and self.ends_unwritten:
            self._unwritten, self._buffer = self._buffer, []
            return False
        if (RUN_STEP, RUN_END) not in self._journaled:
            self._buffer.append(JournalEntry(
                RUN_STEP, RUN_END, "", "", timed(json.dumps({"outcome": outcome, **(detail or {})}), self.started_ns)))
        return True


def step_error(error: BaseException) -> Dict[str, str]:
    """What the journal keeps of a failed step's error, for people (it is
    never raised again): ``{"type": "module:QualName", "message": str(error)}``,
    the message cut at ``STEP_ERROR_CHARS``. Secrets in it are redacted
    where it is shown (``inspection``), as a call's journaled error is."""
    kind = type(error)
    message = str(error)
    if len(message) > STEP_ERROR_CHARS:
        message = message[:STEP_ERROR_CHARS] + "..."
    return {"type": f"{kind.__module__}:{kind.__qualname__}", "message": message}


def _call_name(function_id: str, step: str, ordinal: int) -> str:
    """How errors name a journaled call: ``fn at step #ordinal``."""
    return f"{function_id} at {step} #{ordinal}"
