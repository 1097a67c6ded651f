"""``KeyRunner``: many keys' runs in flight at once, off the operator thread.

A host whose keyed state may only be touched inside a callback for that key
(Flink: ``process_element``/``on_timer``) cannot await a model call in the
callback without stalling every other key of the subtask. The runner
separates running from applying:

- the host hands each record to the runner (``submit``) together with the
  key's state as it stands; the runner runs the key's records one at a time,
  in order, on a background asyncio loop, against its own copy of the key's
  state, with at most ``max_concurrent_runs`` runs in progress at once;
- each finished record becomes a ``Completion`` (its short-term memory after
  the run, its outputs and error records) queued per key;
- the host applies a key's completions to keyed state in a later callback of
  that key (``take``), in order, and emits their outputs there.

The runner never touches the host's state, so keyed state changes only inside
callbacks of its own key. Nothing here knows about Flink.

A host can vanish without a word: PyFlink's thread mode does not call the
Python function's ``close`` when its task is cancelled or stopped with a
savepoint, so the loop thread would go on starting the key's queued records
(model calls, journal writes) in a task manager whose task is gone, beside
the task's next attempt. So a runner given ``host_silence_s`` starts no new
record while its host has not called for that long (and is not blocked in a
wait of the runner's); runs in progress finish, and a host that calls again
resumes the paused keys. A host blocked elsewhere (back-pressure) only
delays new runs.

Where the loop runs is the host's choice. The Flink operator must return from
each callback while runs go on, so the loop has a thread of its own. The local
runner has nothing else to do while runs go on, so it runs the loop on its own
thread whenever it waits (``loop_thread=False``): the same scheduling, without
a second thread contending for the GIL at every hand-off.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Tuple

from flink_agents._pycompat import uncancel
from flink_agents.api.core_options import AgentExecutionOptions, ShortTermMemoryTtlUpdate
from flink_agents.runtime.durability.ids import key_text
from flink_agents.runtime.errors import HostCancelled, RunCancelled
from flink_agents.runtime.execution.completion import Completion
from flink_agents.runtime.execution.memory_entries import MemoryLifetimes
from flink_agents.runtime.engine import AgentEngine
from flink_agents.stores.controls import APPLIED, IGNORED, ControlRequest
from flink_agents.runtime.scheduling.run_slots import RunSlots
from flink_agents.runtime.execution.state import KeyState, PendingRecord

__all__ = ["Completion", "KeyRunner"]

_UNWIND_S = 5.0  # how long cancelled runs may take to unwind when the runner closes

log = logging.getLogger(__name__)

CANCEL_CHECK_S = 0.1  # how often a waiting host asks whether its task was cancelled (KeyRunner: host_cancelled)


class _Worker:
    """The runner's view of one key: records to run, its state copy, results."""

    __slots__ = ("state", "queue", "completions", "progress", "busy", "submitted_through", "running", "cancels",
                 "parked", "key_text", "lifetimes")

    def __init__(self, state: KeyState, lifetimes: MemoryLifetimes | None = None) -> None:
        self.state = state
        self.lifetimes = lifetimes  # the memory TTL between the key's runs, if one is set
        self.queue: Deque[PendingRecord] = deque()
        self.completions: Deque[Completion] = deque()
        self.progress: List[Dict[str, Any]] = []  # published, not yet emitted
        self.busy = False
        self.submitted_through = -1
        self.running: Any = None  # (seq, task) of the run in progress
        self.cancels: Dict[Any, Any] = {}  # seq (None: the next) -> the cancel request
        self.parked: PendingRecord | None = None  # queued again under ``park``; key paused
        self.key_text: str | None = None


class KeyRunner:
    """Runs records of many keys concurrently (see the module docstring).

    Args:
        engine: Runs single records (``AgentEngine.run_one``).
        max_concurrent_runs: Runs in progress at once, over all keys; a run
            waiting for a callback does not count (``run_slots``).
        max_backlog: Records accepted but not finished, over all keys, before
            ``wait_for_capacity`` blocks the host (back-pressure).
        loop_thread: Run the event loop on a thread of its own (a host that
            must return between callbacks); False: on the host's thread,
            while it waits in ``wait_for_capacity``, ``wait_for`` or
            ``wait_until_ready_or_idle`` (a host with nothing else to do).
            Every other method is then to be called from that thread too.
        host_silence_s: Start no new record while the host has not called
            for this long, seconds (see the module docstring); None: never
            pause (a host that cannot vanish).
        host_cancelled: Whether the host's task was cancelled, asked on the
            host's thread every ``CANCEL_CHECK_S`` while it waits on the
            runner; once true the runner closes and the wait raises
            ``HostCancelled``. None: the waits are not cut short.
        loop: With ``loop_thread=False``, a running loop of the host's own
            to run on (an async host: it waits with ``changed`` and never
            calls the blocking waits; the runner does not close it); None:
            a loop of the runner's.
    """

    def __init__(
        self, engine: AgentEngine, max_concurrent_runs: int = 64, max_backlog: int = 1024, *, loop_thread: bool = True,
        host_silence_s: float | None = None, loop: asyncio.AbstractEventLoop | None = None,
        host_cancelled: Callable[[], bool] | None = None,
    ) -> None:
        if max_concurrent_runs < 1:
            raise ValueError(f"max_concurrent_runs must be >= 1, not {max_concurrent_runs}")
        self._engine = engine
        self._max_concurrent_runs = max_concurrent_runs
        self._max_backlog = max(max_backlog, max_concurrent_runs)
        self._workers: Dict[Any, _Worker] = {}
        self._ready: Dict[Any, None] = {}  # keys with completions or progress not yet taken, in order
        self._backlog = 0
        # Held with ``with self._lock`` (the condition's own lock: entering
        # the Condition is a Python-level call more, a dozen times per record).
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        if loop is not None and loop_thread:
            raise ValueError("a loop of the host's own needs loop_thread=False")
        self._owns_loop = loop is None
        self._loop = loop if loop is not None else asyncio.new_event_loop()
        self._slots: RunSlots | None = None
        self._thread: threading.Thread | None = None
        self._wake: asyncio.Future[None] | None = None  # what a waiting host's loop runs until
        self._host_silence_s = host_silence_s
        self._host_seen = time.monotonic()
        self._host_blocked = 0  # host calls waiting in _block_until (present, if silent)
        self._host_cancelled = host_cancelled
        self._cancel_checked_at = time.monotonic()
        self._paused: Dict[Any, _Worker] = {}  # keys whose next record waits for the host
        self._tasks: set[asyncio.Task[None]] = set()  # the keys' work in progress (on the loop)
        self._held: Dict[Any, _Worker] = {}  # keys paused by run control, with records waiting
        self._control = engine.run_control  # runtime.features.run_control, or None
        ttl_ms = engine.config.get(AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_MS)
        self._memory_ttl_s = ttl_ms / 1000.0 if ttl_ms else None
        self._memory_ttl_renewed_on_read = engine.config.get(
            AgentExecutionOptions.SHORT_TERM_MEMORY_STATE_TTL_UPDATE_TYPE) is ShortTermMemoryTtlUpdate.ON_READ_AND_WRITE
        if self._control is not None:
            self._control.attach(self)
            self._control.prime()  # pauses written before this subtask started hold its first records
        if loop_thread:
            self._thread = threading.Thread(target=self._run_loop, name="flink-agents-runner", daemon=True)
            self._thread.start()
        else:
            self._slots = RunSlots(self._max_concurrent_runs)
            if self._control is not None:
                self._control.start(self._loop)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._slots = RunSlots(self._max_concurrent_runs)
        if self._control is not None:
            self._control.start(self._loop)
        self._loop.run_forever()
        self._close_loop()

    # -- host side (the operator thread) ------------------------------------

    def submit(self, key: Any, state: KeyState) -> None:
        """Make sure every pending record of ``state`` runs (each once).

        Call it in a callback of ``key`` after appending a record to the
        key's pending queue, and after a restore (records pending in state).
        """
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            if worker is None:
                self._engine.note_journal(state.journal_id)  # run control reads its requests
                copy = KeyState(journal_id=state.journal_id, short_term_memory=state.short_term_memory,
                                usage=state.usage, budget=state.budget)
                lifetimes = (None if self._memory_ttl_s is None
                             else MemoryLifetimes(self._memory_ttl_s, self._memory_ttl_renewed_on_read))
                worker = self._workers[key] = _Worker(copy, lifetimes)
            # Pending records are in seq order: the new ones are at the end.
            new = []
            for pending in reversed(state.pending):
                if pending.seq <= worker.submitted_through:
                    break
                new.append(pending)
            if not new:
                return
            new.reverse()
            worker.submitted_through = new[-1].seq
            self._backlog += len(new)
            # Queued here, under the lock, so that has_work/wait_for see the
            # records at once, before the loop thread picks them up.
            worker.queue.extend(new)
            if worker.busy or key in self._paused or key in self._held:
                return
            worker.busy = True
        self._schedule_start(key, worker)

    def take(self, key: Any, accept: Callable[[int], bool] | None = None) -> List[Completion]:
        """The finished records of ``key`` not yet taken, in order.

        Args:
            accept: Given a record's seq, whether to take it now; taking
                stops at the first it refuses (records apply in order).
        """
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            if worker is None or not worker.completions:
                return []
            done: List[Completion] = []
            while worker.completions and (accept is None or accept(worker.completions[0].seq)):
                done.append(worker.completions.popleft())
            return done

    def has_completions(self, key: Any) -> bool:
        """Whether ``key`` has finished records not yet taken."""
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            return worker is not None and bool(worker.completions)

    def take_progress(self, key: Any) -> List[Dict[str, Any]]:
        """The progress records ``key``'s runs published, not yet taken, in
        order (published records only: each after its commit landed)."""
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            if worker is None or not worker.progress:
                return []
            records, worker.progress = worker.progress, []
            return records

    def knows(self, key: Any) -> bool:
        """Whether the runner holds ``key`` (false after a restore or release)."""
        with self._lock:
            self._host_here()
            return key in self._workers

    def has_work(self, key: Any) -> bool:
        """Whether ``key`` has records running, queued or not yet taken."""
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            return worker is not None and (
                worker.busy or bool(worker.queue) or bool(worker.completions) or bool(worker.progress)
            )

    def release(self, key: Any) -> bool:
        """Forget an idle key (its state lives in the host); a later submit
        starts from the host's state again (e.g. after a state TTL expired).
        Whether the runner forgot it now (false: it has work, or the runner
        did not hold it)."""
        with self._lock:
            self._host_here()
            worker = self._workers.get(key)
            if worker is None:
                return False
            if worker.busy or worker.queue or worker.completions or worker.progress:
                return False
            del self._workers[key]
            return True

    def wait_for(self, key: Any, seq: int | None = None, timeout_s: float | None = None) -> bool:
        """Block until ``key`` finished record ``seq`` (or all its records).

        Returns:
            Whether that happened within ``timeout_s`` (None: wait for good).
        """

        def done() -> bool:
            worker = self._workers.get(key)
            if worker is None:
                return True
            if seq is None:
                return not worker.busy and not worker.queue
            return any(c.seq >= seq for c in worker.completions) or (
                not worker.busy and not worker.queue
            )

        return self._block_until(done, timeout_s)

    def take_ready(self) -> List[Any]:
        """Keys with finished records or progress not yet taken, in the order
        they became ready (for a host that applies every key's work as it
        comes: the local runner)."""
        with self._lock:
            self._host_here()
            keys, self._ready = list(self._ready), {}
            return keys

    def wait_until_ready_or_idle(self, timeout_s: float | None = None) -> bool:
        """Block until some key is ready (``take_ready``) or nothing runs or
        waits to run; whether a key is ready."""
        def settled() -> bool:  # a key run control holds waits for a resume, not for this host
            return bool(self._ready) or not any(
                w.busy or (w.queue and k not in self._held) for k, w in self._workers.items())

        self._block_until(settled, timeout_s)
        with self._lock:
            return bool(self._ready)

    async def changed(self) -> None:
        """An async host on the runner's loop: wait until the runner's state
        changes (a record finished, progress was published, a key went idle)."""
        if self._wake is None or self._wake.done():
            self._wake = self._loop.create_future()
        await asyncio.shield(self._wake)

    def wait_for_capacity(self) -> None:
        """Block while the backlog is full (back-pressure on the host's input)."""
        self._block_until(lambda: self._backlog < self._max_backlog)

    @property
    def backlog(self) -> int:
        """Records accepted and not yet finished, over all keys."""
        return self._backlog

    def _block_until(self, condition: Callable[[], bool], timeout_s: float | None = None) -> bool:
        """Wait until ``condition()`` holds (checked under the lock); whether
        it did within ``timeout_s``. Without a loop thread, the loop runs
        here meanwhile."""
        if self._thread is not None:
            if self._host_cancelled is None:
                return self._wait_on_loop_thread(condition, timeout_s)
            # In slices: between them, ask (outside the lock, at most every
            # CANCEL_CHECK_S over calls: a host may wait in short slices of
            # its own) whether the host's task was cancelled.
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._wait_on_loop_thread(condition, CANCEL_CHECK_S if left is None else min(CANCEL_CHECK_S, left)):
                    return True
                now = time.monotonic()
                if now - self._cancel_checked_at >= CANCEL_CHECK_S:
                    self._cancel_checked_at = now
                    if self._host_cancelled():
                        with self._lock:
                            running = sum(1 for worker in self._workers.values() if worker.busy)
                        log.warning("the task was cancelled while it waited on the runner: the runner stops, "
                                    "abandoning %d run(s) in progress; their records run again after the restore",
                                    running)
                        self.close()
                        raise HostCancelled("the task was cancelled while waiting for runs in progress")
                if deadline is not None and now >= deadline:
                    return False
        loop = self._loop
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            with self._lock:
                if condition():
                    return True
            if deadline is not None and loop.time() >= deadline:
                return False
            # Run the loop until the runner's state changes (``_changed_now``)
            # or the deadline passes.
            wake = self._wake = loop.create_future()
            timer = None if deadline is None else loop.call_at(deadline, _settle, wake)
            try:
                loop.run_until_complete(wake)
            finally:
                self._wake = None
                if timer is not None:
                    timer.cancel()

    def _wait_on_loop_thread(self, condition: Callable[[], bool], timeout_s: float | None) -> bool:
        with self._lock:
            self._host_here()
            self._host_blocked += 1
            try:
                return self._changed.wait_for(condition, timeout=timeout_s)
            finally:
                self._host_blocked -= 1
                self._host_here()

    def _host_here(self) -> None:
        """The host called (under the lock): it is present; resume the keys
        paused while it was silent."""
        self._host_seen = time.monotonic()
        if not self._paused:
            return
        log.info("flink-agents runner: the host called again; resuming %d paused key(s)", len(self._paused))
        paused, self._paused = self._paused, {}
        for key, worker in paused.items():
            worker.busy = True
            self._schedule_start(key, worker)

    def _schedule_start(self, key: Any, worker: _Worker) -> None:
        """Have the loop start working through ``worker``'s queue."""
        if self._thread is None:
            self._loop.call_soon(self._start, key, worker)
        else:
            self._loop.call_soon_threadsafe(self._start, key, worker)

    def _host_absent(self) -> bool:
        """Whether the host has been silent too long (under the lock)."""
        return (
            self._host_silence_s is not None and self._host_blocked == 0
            and time.monotonic() - self._host_seen > self._host_silence_s
        )

    def _close_loop(self) -> None:
        """Close the stopped loop. Runs still in progress are cancelled and
        unwind here, on the loop, within ``_UNWIND_S`` (else their coroutines
        would be closed by the garbage collector, in no context of theirs);
        then async clients held per loop close on it."""
        loop = self._loop
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=_UNWIND_S))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def _changed_now(self) -> None:
        """Tell the waiting host: the runner's state changed (under the lock)."""
        self._changed.notify_all()
        if self._wake is not None:
            _settle(self._wake)

    def close(self) -> List["asyncio.Task[None]"]:
        """Stop the loop (runs still in progress are abandoned; their records
        are still pending in the host's state and run again after a restore).
        On a loop of the host's own, cancel the runs in progress instead and
        return their tasks, for the host to await their unwinding."""
        if self._thread is None:
            if self._control is not None:
                self._control.stop()
            if not self._owns_loop:
                tasks = [task for task in self._tasks if not task.done()]
                for task in tasks:
                    task.cancel()
                return tasks
            if not self._loop.is_closed():
                self._close_loop()
            return []
        # Safe before run_forever too: a stop scheduled early ends the loop
        # as soon as it starts.
        try:
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:
            pass  # the loop already closed
        self._thread.join(timeout=10)
        return []

    # -- runner side (the loop thread) ---------------------------------------

    def _progress_sink(self, key: Any, worker: _Worker) -> Any:
        def publish(records: List[Dict[str, Any]]) -> None:
            with self._lock:
                worker.progress.extend(records)
                self._ready[key] = None
                self._changed_now()

        return publish

    def _start(self, key: Any, worker: _Worker) -> None:
        task = self._loop.create_task(self._work(key, worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _work(self, key: Any, worker: _Worker) -> None:
        assert self._slots is not None  # set when the loop started
        while True:
            with self._lock:
                if not worker.queue:
                    worker.busy = False
                    self._changed_now()
                    return
                if self._host_absent():
                    if not self._paused:
                        log.warning(
                            "flink-agents runner: the operator has not called for %.0f s (its task ended without "
                            "close, as thread-mode tasks do when cancelled or stopped, or it is blocked): starting "
                            "no new record until it calls again", time.monotonic() - self._host_seen)
                    worker.busy = False
                    self._paused[key] = worker
                    self._changed_now()
                    return
                # A cancelled record ends even while its key is paused.
                cancel = worker.cancels.pop(worker.queue[0].seq, None)
                if cancel is None and self._is_paused(key, worker):
                    worker.busy = False
                    self._held[key] = worker
                    self._changed_now()
                    return
                record = worker.queue.popleft()
                if record is worker.parked:
                    worker.parked = None
            if cancel is not None:  # cancelled while it waited for its turn
                completion = await self._cancelled(key, worker, record, cancel)
            else:
                slots = self._slots
                slot = slots.take_now() or await slots.take()  # a free slot without a coroutine
                token = slots.enter(slot)
                try:
                    completion = await self._run(key, worker, record)
                finally:
                    slots.exit(token)
                    slots.release(slot)
            if completion.parked is not None:
                await self._park(key, worker, record, completion.parked)
                continue
            with self._lock:
                worker.completions.append(completion)
                self._ready[key] = None
                self._backlog -= 1
                if completion.failure is not None:
                    # The job fails with this record; later ones stay pending
                    # in the host's state and run after a restore.
                    self._backlog -= len(worker.queue)
                    worker.queue.clear()
                self._changed_now()

    async def _run(self, key: Any, worker: _Worker, record: PendingRecord) -> Completion:
        """Run ``record`` on this task; a cancel request for it
        (``apply_cancel``) cancels this task, which then ends the record as
        cancelled and goes on with the key's next records. Any other
        cancellation (the runner closes) propagates: the record stays
        pending in the host's state."""
        current = asyncio.current_task()
        worker.running = (record.seq, current)
        lifetimes = worker.lifetimes
        if lifetimes is not None:  # entries past their TTL are gone before the record starts
            worker.state.short_term_memory = lifetimes.start(worker.state.short_term_memory)
            worker.state.memory_reads = set() if lifetimes.renewed_on_read else None
        try:
            completion = await self._engine.run_to_completion(
                key, worker.state, record, self._progress_sink(key, worker) if self._engine.progress_enabled else None)
            if lifetimes is not None:
                lifetimes.finish(worker.state.short_term_memory, worker.state.memory_reads or ())
                completion.memory_reads, worker.state.memory_reads = worker.state.memory_reads, None
            return completion
        except asyncio.CancelledError:
            cancel = worker.cancels.pop(record.seq, None)
            if cancel is None or current is None or uncancel(current) > 0:
                raise
            return await self._cancelled(key, worker, record, cancel)
        except BaseException as exc:  # handed to the host, which fails the job
            return Completion(record.seq, worker.state.short_term_memory, failure=exc)
        finally:
            worker.running = None

    async def _cancelled(self, key: Any, worker: _Worker, record: PendingRecord, cancel: ControlRequest) -> Completion:
        cancelled = RunCancelled(key, record.seq, cancel.control_id, cancel.requested_by)
        try:
            return await self._engine.end_cancelled(key, worker.state, record, cancelled)
        except Exception as exc:  # its run end could not be written: the record fails, a restart replays it
            return Completion(record.seq, worker.state.short_term_memory, failure=exc)

    async def _park(self, key: Any, worker: _Worker, record: PendingRecord, parked: BaseException) -> None:
        """Queue ``record`` again at the head and pause its key, durably."""
        with self._lock:
            worker.queue.appendleft(record)
            worker.parked = record
        log.warning("flink-agents runner: key %r, record #%d parked (resume or retry it after a fix): %s",
                    key, record.seq, parked)
        control = self._control
        if control is None:
            return
        journal_id = worker.state.journal_id or self._engine.job_id
        try:
            await control.park(journal_id, self._key_text(key, worker), record.seq, str(parked))
        except Exception as error:  # paused in this subtask all the same; say the pause is not durable
            log.error("flink-agents runner: the pause of parked key %r could not be stored (%r): a restart "
                      "runs its record again", key, error)

    # -- run control (on the loop thread: RunControl polls there) -------------

    def _key_text(self, key: Any, worker: _Worker) -> str:
        if worker.key_text is None:
            worker.key_text = key_text(key)
        return worker.key_text

    def _is_paused(self, key: Any, worker: _Worker) -> bool:
        """Whether run control holds the key's next record (under the lock)."""
        if worker.parked is not None and worker.queue and worker.queue[0] is worker.parked:
            return True
        control = self._control
        return control is not None and control.any_paused and control.is_paused(
            worker.state.journal_id or self._engine.job_id, self._key_text(key, worker))

    def _find(self, journal_id: str, text: str) -> Tuple[Any, _Worker] | Tuple[None, None]:
        for key, worker in self._workers.items():
            if (worker.state.journal_id or self._engine.job_id) == journal_id and self._key_text(key, worker) == text:
                return key, worker
        return None, None

    def apply_cancel(self, request: ControlRequest) -> str | None:
        with self._lock:
            key, worker = self._find(request.journal_id, request.key)
            if worker is None:
                return None
            running = worker.running
            if running is not None and request.seq in (None, running[0]):
                worker.cancels[running[0]] = request
                running[1].cancel()
                return f"cancelled the run of record #{running[0]}"
            queued = [r.seq for r in worker.queue]
            seq = request.seq if request.seq is not None else (queued[0] if queued else None)
            if seq is None or seq not in queued:
                return None
            worker.cancels[seq] = request
            if key in self._held and worker.queue[0].seq == seq:
                # Paused or parked: its turn would not come; end it now.
                if worker.parked is worker.queue[0]:
                    worker.parked = None
                del self._held[key]
                worker.busy = True
                self._schedule_start(key, worker)
                return f"cancelled record #{seq}, which was waiting (key paused)"
            return f"record #{seq} is cancelled when its turn comes"

    def apply_retry(self, request: ControlRequest) -> Tuple[str, str] | None:
        with self._lock:
            key, worker = self._find(request.journal_id, request.key)
            if worker is None:
                return None
            parked = worker.parked
            if parked is None and key in self._held and worker.queue and worker.queue[0].seq == request.seq:
                parked = worker.queue[0]  # parked before a restart: its key's pause held it since
            if parked is None or parked.seq != request.seq:
                if any(r.seq == request.seq for r in worker.queue):
                    return IGNORED, f"record #{request.seq} is queued, not parked: it runs when its turn comes"
                return None
            worker.parked = None
            self._start_held(key)
            return APPLIED, f"record #{request.seq} runs again"

    def resume_key(self, journal_id: str, text: str) -> None:
        with self._lock:
            key, worker = self._find(journal_id, text)
            if worker is None:
                return
            worker.parked = None  # resuming a key retries its parked record
            self._start_held(key)

    def _start_held(self, key: Any) -> None:
        worker = self._held.pop(key, None)
        if worker is not None and not worker.busy:
            worker.busy = True
            self._schedule_start(key, worker)

    def is_held(self, key: Any) -> bool:
        """Whether run control holds the key (paused or parked): a host lets
        the watermark pass it, as a run waiting for a callback."""
        with self._lock:
            return key in self._held


def _settle(wake: "asyncio.Future[None]") -> None:
    if not wake.done():
        wake.set_result(None)
