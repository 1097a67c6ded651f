"""``KeyedHost``: a record's life on its key, written once for every host.

The path of one input record (file names under ``flink_agents/runtime/``):

1. **Arrive.** The host adapter turns its callback into a call here: the
   Flink operator's ``process_element`` (``flink/operator.py``) calls
   ``process``, the local runner's loop (``local/host.py``) ``accept``.
2. **Admit.** The value goes through the typed codec
   (``execution/state.py: admit``): the run sees what a restore reads back,
   and a value the codec refuses fails here, naming key, record and field.
3. **Enqueue.** It is appended to the key's pending queue in ``KeyState``
   with the key's next seq and stored through the driver port
   (``driver.py: KeyedDriver``; ``local/driver.py``, ``flink/driver.py``).
4. **Submit.** The key's state goes to the scheduler
   (``scheduling/key_runner.py: KeyRunner.submit``), which runs each key's
   records one at a time, in order, on an asyncio loop, against its own copy
   of the key's state (``engine.py: AgentEngine.run_to_completion`` ->
   ``execution/action_loop.py``), and turns each finished record into a
   ``Completion``. A full backlog blocks the host (``wait_for_capacity``).
5. **Apply.** In a later call for the key (``_apply``), its completions are
   applied to keyed state with the one apply step
   (``execution/completion.py: apply_completions``: all or nothing per
   record) and stored.
6. **Emit.** Outputs, error records (``skip``) and progress records go to
   the port (``emit``, ``emit_error``, ``emit_progress``); a failed record
   (``fail``) raises after what finished before it was emitted.
7. **Timers** (``process``/``on_timer``, a host whose keyed state and
   timers are scoped to a callback of the key: the Flink operator). A
   finished record is applied only in a callback of its own key: in
   ``process`` right away if it finished within ``flink.inline_wait_ms``,
   else in a processing-time timer polling every ``flink.poll_interval_ms``
   (every ``flink.parked_poll_interval_ms`` while the key's run waits for a
   callback). An event-time timer at each record's timestamp waits for that
   record, so a watermark never passes a record still in flight, unless the
   record waits for a callback (an outside system may take hours: holding
   the host's thread that long would stall every key and every checkpoint),
   whose outputs then come from a later poll, behind the watermark; one at
   the end of time (the final watermark of a bounded input) waits for all
   of the key's work, since processing-time timers are dropped at the end
   of input. A callback's deadline is a processing-time timer of its key,
   kept with the callback's id in keyed state
   (``KeyState.callback_deadlines``): when it fires, the callback times out
   (``CallbackHub.expire``) unless a completion won already, also after a
   restore, before the run has been replayed. A timer of a key the
   scheduler does not hold (after a restore) resubmits its pending records.
   The local host has no timers: it applies every key's work as soon as it
   is ready (``accept``, ``apply_ready``, ``drain``), and the callback
   poller enforces deadlines.
8. **Release.** An idle key is forgotten by the scheduler, its steering
   mailbox and the deadline cache: its state lives in the host; the key's
   next record starts from it.

Steering messages (``steering.enabled``) take the same first steps: admitted,
queued in ``KeyState.steering`` and in the key's mailbox
(``features/steering.py``); a full queue yields an error record.

Nothing here knows Flink or the local runner: what differs is the port.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from flink_agents.api.core_options import RuntimeOptions
from flink_agents.runtime.durability.ids import key_text
from flink_agents.runtime.driver import KeyedDriver
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.execution.completion import apply_completions
from flink_agents.runtime.execution.state import KeyState, PendingRecord, admit
from flink_agents.runtime.features.steering import SteeringQueueFull, steering_error
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.stores.controls import APPLIED, IGNORED

__all__ = ["END_OF_TIME_MS", "KeyedHost"]

END_OF_TIME_MS = 2**63 - 1  # Long.MAX_VALUE: an event-time timer that fires with the final watermark


class KeyedHost:
    """Owns the life of each record on its key (see the module docstring).

    Args:
        engine: Runs records; its steering mailboxes and callback hub.
        driver: The host's port: keyed state, emission, timers.
        runner: The scheduler the records run on.
        inline_wait_s: How long ``process`` waits for a record that may
            finish at once, to apply it without a timer round trip.
        poll_interval_ms: A busy key's polling interval (``process`` and
            ``on_timer`` hosts).
        parked_poll_interval_ms: The polling interval of a key whose run
            waits for a callback (maybe for hours): thousands of parked keys
            must not cost a timer each ``poll_interval_ms``.
    """

    def __init__(
        self, engine: AgentEngine, driver: KeyedDriver, runner: KeyRunner, *, inline_wait_s: float = 0.0,
        poll_interval_ms: int = 100, parked_poll_interval_ms: int = 1000,
    ) -> None:
        self._engine = engine
        self._driver = driver
        self._runner = runner
        self._inline_wait_s = inline_wait_s
        self._poll_interval_ms = poll_interval_ms
        self._parked_poll_interval_ms = parked_poll_interval_ms
        # A cache of KeyState.callback_deadlines (the truth, in checkpoints)
        # per key with callbacks in flight: id -> (deadline ms, record seq),
        # so that polls need not read state. Filled when deadlines are armed,
        # or from state after a restore; dropped when the key is released.
        self._deadlines: Dict[Any, Dict[str, Tuple[int, int]]] = {}
        # Run control (runtime.features.run_control): records that ended on
        # the error stream stay retryable in keyed state for a while.
        self._control = engine.run_control
        self._keep_failed, self._keep_failed_ms, self._retry_poll_ms = 0, 0, 1
        if self._control is not None:
            config = engine.config
            self._keep_failed = config.get(RuntimeOptions.RUN_CONTROL_KEEP_FAILED)
            self._keep_failed_ms = int(config.get(RuntimeOptions.RUN_CONTROL_KEEP_FAILED_S) * 1000)
            self._retry_poll_ms = max(int(config.get(RuntimeOptions.RUN_CONTROL_RETRY_POLL_INTERVAL_MS)), 1)
        self._timers = False  # a host with timers (process/on_timer) polls keys holding retryable records

    # -- the steps every host takes ----------------------------------------

    def enqueue(self, key: Any, value: Any, timestamp_ms: int | None = None) -> Tuple[KeyState, PendingRecord]:
        """Admit ``value``, append it to the key's pending queue, store the
        state and submit it to the scheduler."""
        state = self._driver.load(key) or KeyState(journal_id=self._engine.job_id)
        record = PendingRecord(state.next_seq, admit(key, state.next_seq, value), timestamp_ms)
        state.pending.append(record)
        state.next_seq += 1
        self._driver.store(key, state)
        self._submit(key, state)
        return state, record

    def resume(self, key: Any) -> KeyState | None:
        """Submit the records pending in the key's state (after a restore
        the scheduler has not seen them); the key's state."""
        state = self._driver.load(key)
        if state is not None and state.pending:
            self._submit(key, state)
        return state

    def _submit(self, key: Any, state: KeyState) -> None:
        """Have every pending record of ``state`` run (each once); after a
        restore the mailbox is empty: refill it from state first."""
        self._engine.mailboxes.refill(key, state)
        self._runner.submit(key, state)

    def steer(self, key: Any, message: Any) -> None:
        """Accept a steering message for ``key``: admitted, queued in its
        state and mailbox; a full queue emits an error record instead."""
        state = self._driver.load(key) or KeyState(journal_id=self._engine.job_id)
        message = admit(key, state.next_steering_seq, message, "steering message")
        try:
            self._engine.mailboxes.accept(key, state, message)
        except SteeringQueueFull as full:
            self._driver.emit_error(key, steering_error(key, message, full))
            return
        self._driver.store(key, state)

    def _apply(self, key: Any, emits_at: int | None = None, applies_through: int | None = None) -> None:
        """Emit the key's published progress; apply its finished records to
        its state and emit their outputs and error records.

        A record's outputs carry the timestamp of the callback that emits
        them, so a timestamped record is applied only in a callback of its
        own timestamp (its ``process``, its event-time timer: ``emits_at``),
        or once the watermark has passed it (``applies_through``: its own
        timer has fired, e.g. while the record waited for a callback; the
        documented exception). Untimed records apply in any callback, and
        every record when ``applies_through`` is None (a host without
        timers). Records apply in order: a held record holds those after it.

        Raises:
            BaseException: A finished record's failure (``fail`` strategy),
                after what finished before it was applied and emitted.
        """
        progress = self._runner.take_progress(key)
        if progress:
            self._driver.emit_progress(progress)
        if not self._runner.has_completions(key):
            return  # (a poll then reads no state)
        state = self._driver.load(key)
        assert state is not None  # a completion implies a submitted record
        if applies_through is None:
            completions = self._runner.take(key)
        else:
            timestamps = {r.seq: r.timestamp_ms for r in state.pending}

            def in_this_callback(seq: int) -> bool:
                ts = timestamps.get(seq)
                return ts is None or ts == emits_at or ts <= applies_through or applies_through == END_OF_TIME_MS

            completions = self._runner.take(key, in_this_callback)
        if not completions:
            return
        applied = apply_completions(key, state, completions)  # also closes the runs' deadlines in state
        if state.failed:
            self._trim_failed(state)
        self._driver.store(key, state)
        if state.failed and self._timers:
            self._arm_retry_poll()
        known = self._deadlines.get(key)
        if known:  # the finished runs' callbacks are closed now
            finished = {completion.seq for completion in completions}
            for callback_id in [c for c, (_, seq) in known.items() if seq in finished]:
                del known[callback_id]
        for (is_error, value), seq in zip(applied.emissions, applied.seqs):
            if is_error:
                self._driver.emit_error(key, value)
            else:
                self._driver.emit_record(key, seq, value)
        applied.raise_failure()

    def _release(self, key: Any) -> None:
        """Forget an idle key (its state lives in the host)."""
        if self._runner.release(key):
            self._engine.mailboxes.forget(key)
        if not self._runner.knows(key):  # its next run starts from keyed state
            self._driver.forget(key)
        self._deadlines.pop(key, None)

    def wait_for_capacity(self) -> None:
        """Block while the scheduler's backlog is full (back-pressure on the
        host's input)."""
        self._runner.wait_for_capacity()

    # -- a host that applies every key's work as it comes (local) -----------

    def accept(self, key: Any, value: Any) -> None:
        """Queue one input record of ``key``, apply what is ready, and block
        while the backlog is full.

        Raises:
            InputRecordError: The record holds a value the codec refuses.
            BaseException: A finished record's failure (``fail`` strategy).
        """
        self.enqueue(key, value, None)
        self.apply_ready()
        self.wait_for_capacity()

    def apply_ready(self) -> None:
        """Apply the work of every key that has some; release idle keys."""
        for key in self._runner.take_ready():
            self.apply(key)

    def apply(self, key: Any) -> None:
        """Apply the key's finished work; release the key if it is idle."""
        self._apply(key)
        self._take_retries(key)
        if not self._runner.has_work(key):
            # Idle: its state lives in the driver; a later record starts
            # from it (with the memory TTL applied).
            self._release(key)

    def drain(self) -> None:
        """Apply work until every accepted record has finished.

        Raises:
            BaseException: A finished record's failure (``fail`` strategy).
        """
        while self._runner.wait_until_ready_or_idle():
            self.apply_ready()
        self.apply_ready()

    # -- a host whose keyed state and timers are scoped to a callback of the key (Flink)

    def process(self, key: Any, value: Any, timestamp_ms: int | None, steering: bool = False) -> bool:
        """A callback of ``key`` with an input record (or, ``steering``, a
        steering message): apply what finished, queue the record, and either
        apply it at once or arm the key's timers.

        Returns:
            Whether a record was queued (the host then waits for capacity).
        """
        self._timers = True
        watermark = self._driver.current_watermark()
        self._apply(key, timestamp_ms, watermark)
        self._take_retries(key)
        if steering:
            self.steer(key, value)
            if not self._runner.knows(key):  # nothing runs: keep no memory of it cached
                self._driver.forget(key)
            return False
        state, record = self.enqueue(key, value, timestamp_ms)
        # Fast path: a record that finishes at once (no slow call) is applied
        # here, without a timer round trip.
        if len(state.pending) == 1 and self._runner.wait_for(key, record.seq, self._inline_wait_s):
            self._apply(key, timestamp_ms, watermark)
        if self._runner.has_work(key):
            self._schedule(record.timestamp_ms)
        else:
            self._release(key)
        return True

    def on_timer(self, key: Any, timestamp_ms: int, event_time: bool) -> None:
        """A timer of ``key`` fired: a poll, a callback deadline (processing
        time), a record's timestamp or the end of time (event time)."""
        self._timers = True
        if not event_time:
            self._expire_due(key, timestamp_ms)
            self._take_retries(key)
        # What this callback's outputs carry: an event-time timer's
        # timestamp; a poll's none (only untimed or overdue records apply).
        emits_at = timestamp_ms if event_time else None
        applies_through = timestamp_ms if event_time else self._driver.current_watermark()
        if not event_time and self._runner.knows(key):
            # A poll: apply what finished, without reading state otherwise.
            self._arm_deadlines(key)
            self._apply(key, emits_at, applies_through)
            self._after_callback(key)
            return
        state = self.resume(key)  # after a restore the runner has not seen them
        if state is None or not state.pending:
            if state is not None and state.failed and self._trim_failed(state, store_key=key):
                self._arm_retry_poll()  # still retryable: call the key again
            self._release(key)
            return
        if event_time:
            # The watermark may not pass records still in flight: wait for them.
            final = timestamp_ms == END_OF_TIME_MS
            due = [r.seq for r in state.pending if final or (r.timestamp_ms or 0) <= timestamp_ms]
            if due:
                self._arm_deadlines(key)
                self._wait_unless_parked(key, due[-1], final)
        self._arm_deadlines(key)
        self._apply(key, emits_at, applies_through)
        self._after_callback(key)

    def _after_callback(self, key: Any) -> None:
        if self._runner.has_work(key):
            self._schedule(None, parked=self._is_parked(key))
        else:
            self._release(key)

    def _is_parked(self, key: Any) -> bool:
        """Whether a run of the key waits for a callback."""
        if self._runner.is_held(key):  # paused or parked by run control
            return True
        hub = self._engine.callbacks
        return hub is not None and bool(self._deadlines.get(key)) and hub.has_open_callbacks(key_text(key))

    def _wait_unless_parked(self, key: Any, seq: int, final: bool) -> None:
        """Wait for the key's record ``seq``, but not for a callback: a run
        waiting on one lets the watermark pass (an outside system may take
        hours: holding the host's thread that long would stall every key and
        every checkpoint; its outputs then come from a later poll, behind
        the watermark). At the final watermark nothing fires later, so it
        waits for all, bounded by the callbacks' deadlines."""
        hub = self._engine.callbacks
        if final:
            self._runner.wait_for(key, seq)  # a paused key's records too: until it is resumed
            return
        text = key_text(key)
        while not self._runner.wait_for(key, seq, 0.05):
            if self._runner.is_held(key):
                return  # paused by run control: its outputs come from a later poll
            if hub is not None and hub.has_open_callbacks(text):
                return

    def _schedule(self, timestamp_ms: int | None, parked: bool = False) -> None:
        """Arm a busy key's timers: its next polls, the end of time, and the
        record's timestamp."""
        driver = self._driver
        now = driver.current_processing_time()
        interval = self._parked_poll_interval_ms if parked else self._poll_interval_ms
        next_poll = (now // interval + 1) * interval
        driver.register_processing_time_timer(next_poll)
        # And the one after: a registration made in on_timer may miss a
        # checkpoint barrier already waiting (flink-python applies it later),
        # and the previous poll's second timer is then what the checkpoint
        # holds, so a restored key is still polled. Flink dedups equal timers;
        # the cost is at most one extra poll, which releases an idle key.
        driver.register_processing_time_timer(next_poll + interval)
        # Processing-time timers are dropped at the end of a bounded input:
        # the final watermark's timer waits for all of the key's work.
        driver.register_event_time_timer(END_OF_TIME_MS)
        if timestamp_ms is not None:
            driver.register_event_time_timer(timestamp_ms)

    # -- retries of records that ended on the error stream (run control) ----

    def _trim_failed(self, state: KeyState, store_key: Any = None) -> bool:
        """Drop kept records past ``run_control.keep_failed_s`` or beyond the
        newest ``run_control.keep_failed`` (storing the state if
        ``store_key`` is given and something went); whether any are left."""
        now_ms = int(self._engine.clock.now() * 1000)
        kept = [entry for entry in state.failed if now_ms - int(entry[2]) < self._keep_failed_ms]
        kept = kept[len(kept) - self._keep_failed:] if self._keep_failed else []
        if len(kept) != len(state.failed):
            state.failed = kept
            if store_key is not None:
                self._driver.store(store_key, state)
        return bool(state.failed)

    def _arm_retry_poll(self) -> None:
        """A processing-time timer of the current key: a key holding
        retryable records must be called to take a retry request (its
        keyed state is reachable only in a callback of its own)."""
        now = self._driver.current_processing_time()
        self._driver.register_processing_time_timer((now // self._retry_poll_ms + 1) * self._retry_poll_ms)

    def _take_retries(self, key: Any) -> None:
        """Queue again the kept records of ``key`` a retry request names, as
        the key's next records continuing their journals; say of a request
        for a record this key does not keep that it was ignored."""
        control = self._control
        if control is None or not control.has_retries:
            return
        state = self._driver.load(key)
        if state is None:
            return
        requests = control.retries_for(state.journal_id or self._engine.job_id, key_text(key))
        if not requests:
            return
        queued = False
        for request in requests:
            entry = next((e for e in state.failed if e[0] == request.seq), None)
            if entry is None:
                control.took(request, IGNORED, f"record #{request.seq} is not kept for a retry (it did not end on "
                                                 "the error stream, was retried already, or aged out)")
                continue
            state.failed.remove(entry)
            record = PendingRecord(state.next_seq, entry[1], None, replays=request.seq)
            state.pending.append(record)
            state.next_seq += 1
            queued = True
            control.took(request, APPLIED, f"record #{request.seq} queued again as #{record.seq}")
        self._driver.store(key, state)
        if queued:
            self._submit(key, state)

    # -- callback deadlines ------------------------------------------------

    def _arm_deadlines(self, key: Any) -> None:
        """Turn the deadlines of the key's new callbacks (queued by the runs:
        ``KeyedDriver.arm_deadline``) into timers, and keep them in keyed
        state (a checkpoint then holds both)."""
        requests = self._driver.take_deadlines(key)
        if not requests:
            return
        state = self._driver.load(key)
        if state is None:
            return
        known = self._deadlines.setdefault(key, {})
        for callback_id, deadline_ms, seq in requests:
            if callback_id in known:
                continue  # a replay asked again; Flink dedups the timer too
            known[callback_id] = (deadline_ms, seq)
            state.callback_deadlines.append([callback_id, deadline_ms, seq])
            self._driver.register_processing_time_timer(deadline_ms)
        self._driver.store(key, state)

    def _expire_due(self, key: Any, now_ms: int) -> None:
        """Time out the key's callbacks whose deadline timer fired
        (``CallbackHub.expire``) unless a completion won already, also after
        a restore, before the run has been replayed."""
        hub = self._engine.callbacks
        if hub is None:
            return
        known = self._deadlines.get(key)
        if known is None:
            if self._runner.knows(key):
                return  # no callbacks armed for this key
            # After a restore: the deadlines are in keyed state only.
            state = self._driver.load(key)
            if state is None or not state.callback_deadlines:
                return
            known = self._deadlines[key] = {e[0]: (int(e[1]), int(e[2])) for e in state.callback_deadlines}
        due: List[str] = [callback_id for callback_id, (deadline_ms, _) in known.items() if deadline_ms <= now_ms]
        if not due:
            return
        hub.expire(due)
        for callback_id in due:
            del known[callback_id]
        state = self._driver.load(key)
        if state is not None:
            state.callback_deadlines = [e for e in state.callback_deadlines if e[0] not in due]
            self._driver.store(key, state)
