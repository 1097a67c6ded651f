"""``AgentEngine``: runs one record of a key against its journal.

One engine per operator instance (subtask) or local runner. The host core
(``runtime.keyed_host.KeyedHost``) owns a record's life on its key (queue,
scheduling, applying, emission, timers); the scheduler
(``runtime.scheduling.key_runner``) hands the engine one record at a time
with a copy of the key's state (``run_to_completion`` -> ``run_one`` ->
``action_loop.run_record``), against the journal
(``runtime.durability.journal.RunJournal``), and gets a ``Completion``.
The engine also holds what runs share: resources, executors, the callback
hub, sub-agents, the keys' steering mailboxes, counters, and pruning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Tuple

from flink_agents._pycompat import add_note
from flink_agents.api.configuration import ConfigurationView, ReadableConfiguration
from flink_agents.api.core_options import AgentExecutionOptions, RuntimeOptions, validate_options
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.execution.action_loop import run_record
from flink_agents.runtime.features.callbacks import CallbackHub
from flink_agents.runtime.execution.completion import Completion
from flink_agents.runtime.errors import ActionFailed, JournalUnavailable, RecordParked, RecordSkipped, RunCancelled
from flink_agents.runtime.scheduling.executors import Executors
from flink_agents.runtime.durability.codec_classes import trust_package
from flink_agents.runtime.durability.codec_reachable import register_plan_classes
from flink_agents.runtime.durability.ids import RunIdentity, key_text
from flink_agents.runtime.durability.input_digest import input_digest
from flink_agents.runtime.durability.journal import RunJournal, step_error
from flink_agents.runtime.durability.shared_store import report_other_journals
from flink_agents.runtime.execution.metrics import RunCounters
from flink_agents.runtime.features.progress import RunProgress
from flink_agents.runtime.execution.extensions import EXTENSIONS
from flink_agents.runtime.execution.resources import ResourceCache
from flink_agents.runtime.execution.run import Clock, Run, RunServices
from flink_agents.runtime.execution.token_usage import count_replayed, run_totals
from flink_agents.runtime.execution.usage import PriceTable, add_to_totals
from flink_agents.runtime.features.budgets import Budgets
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.runtime.features.steering import SteeringMailboxes
from flink_agents.runtime.features.sub_agents import SubAgentRunner
from flink_agents.runtime.features.event_log import EventLog
from flink_agents.runtime.features.otel_export import job_tracing
from flink_agents.runtime.features.trace_records import with_trace_records
from flink_agents.runtime.features import register_all
from flink_agents.runtime.features.run_control import RunControl
from flink_agents.runtime.features.rate_limits import RateLimits
from flink_agents.stores.callbacks import CallbackStore
from flink_agents.stores.controls import ControlStore
from flink_agents.stores.factory import open_journal_store
from flink_agents.stores.journal import JournalStore

__all__ = ["AgentEngine"]

register_all(EXTENSIONS)  # features plug into execution/ here (runtime.execution.extensions)

log = logging.getLogger(__name__)
_KEY_TEXTS_KEPT = 65536  # str keys whose text the engine keeps (AgentEngine._text_of)


class AgentEngine:
    """Runs an ``AgentPlan`` for many keys.

    Args:
        plan: The compiled agent.
        config: The job's agent configuration (``ctx.config``): a mapping
            of keys declared in ``flink_agents.api.core_options`` (see
            ``docs/operations.md``) and the user's own keys; every declared
            option set in it is validated here.
        job_id: Journal namespace of keys this engine sees first.
        store: The journal store; default from ``config`` (``journal.store``,
            in-memory if unset).
        clock: Time for runs, callbacks and pruning (``runtime.execution.run.Clock``),
            or a callable giving Unix seconds; injectable for tests.
        sleep: ``await sleep(delay_s)`` for the clock (retry backoff);
            injectable for tests.
        deadline_timers: The host's ``KeyedDriver.arm_deadline``, for a
            host whose timers survive a restore (the Flink operator).
        task: ``(task name, subtask index)`` of the host, for the file
            event logger's file name (``runtime.features.event_log``); only
            subtask 0 reports a shared store (``report_shared_store``).
        parallelism: How many subtasks run this agent: each takes
            ``1/parallelism`` of the job's budgets (``budget.job.*``,
            ``runtime.features.budgets``) and holds its model connections to
            ``limit // parallelism`` of their rate limits, or, with
            ``rate_limits.scope: job``, to their whole limits through one
            window per connection shared in ``store`` under ``job_id``
            (``runtime.features.rate_limits``).
    """

    def __init__(
        self,
        plan: AgentPlan,
        config: Mapping[str, Any] | None = None,
        job_id: str = "job",
        store: JournalStore | None = None,
        clock: Clock | Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        deadline_timers: Callable[[Any, str, int, int], None] | None = None,
        task: Tuple[str, int] = ("local", 0),
        parallelism: int = 1,
    ) -> None:
        self.plan = plan
        # Read-only and validated up front: a bad option fails the job at
        # start, naming the key (flink_agents.api.core_options).
        self.config: ReadableConfiguration = validate_options(ConfigurationView(config or {}))
        self.job_id = job_id
        # Before any state or journal is read: the classes stored data may
        # name are the plan's, the runtime's, the standard library's and
        # those of the packages listed (runtime.durability.codec_classes).
        register_plan_classes(plan)
        for package in self.config.get(RuntimeOptions.JOURNAL_TRUSTED_PACKAGES) or ():
            trust_package(package)
        self.counters = RunCounters()
        self._owns_store = store is None
        # An engine built directly (tests, embedding) journals in memory unless
        # told otherwise; the Flink runner asks for SQLite by default.
        self.store = store if store is not None else open_journal_store({"journal.store": "memory", **self.config})
        self.clock = Clock.of(clock, sleep)
        self._retention_s = self.config.get(RuntimeOptions.JOURNAL_RETENTION_S)
        self._prune_interval_s = self.config.get(RuntimeOptions.JOURNAL_PRUNE_INTERVAL_S)
        self._last_prune = self.clock.now()
        # The journals this engine's runs use: its own id, and the ids that
        # restored keys carry (``KeyState.journal_id``). Pruning deletes
        # their finished runs and never another journal's.
        self._journal_ids: set[str] = {job_id}
        self._key_texts: Dict[str, str] = {}  # str key -> key_text (``_text_of``)
        self._shared_services: RunServices | None = None  # (``_services_for``)
        # Blocking user calls on a pool sized to num-async-threads (0.3.1's
        # key), by default the run concurrency; store I/O on its own
        # (runtime.scheduling.executors).
        self.executors = Executors(
            self.config.get(AgentExecutionOptions.NUM_ASYNC_THREADS)
            or self.config.get(RuntimeOptions.MAX_CONCURRENT_RUNS)
        )
        # Rate limits and 429 cool-downs of the model connections: this
        # subtask's share, or (rate_limits.scope: job) a job-wide window in
        # the store, claimed on the I/O threads.
        self.rate_limits = RateLimits(self.config, parallelism, self.counters.metrics.root, store=self.store,
                                      job_id=job_id, io=self.executors.io)
        self._resources = ResourceCache(plan, on_connection=self.rate_limits.wrap)
        # Callbacks live beside the journal, in the same store.
        self.callbacks: CallbackHub | None = (
            CallbackHub(self.store, self.config, self.counters, self.clock, self.executors, deadline_timers)
            if isinstance(self.store, CallbackStore) else None
        )
        # Pause, resume, cancel, retry requests from the store (the runner polls them).
        self.run_control: RunControl | None = (
            RunControl(self.store, self._top_journal_ids, self.config.get(RuntimeOptions.RUN_CONTROL_POLL_INTERVAL_MS) / 1000.0,
                       self.clock.now_ms, self.executors.io)
            if isinstance(self.store, ControlStore) and self.config.get(RuntimeOptions.RUN_CONTROL_ENABLED) else None
        )
        # Records that end on the error stream are kept for `runs retry` (opt in: state and a timer per key).
        self.keep_failed = self.run_control is not None and self.config.get(RuntimeOptions.RUN_CONTROL_KEEP_FAILED) > 0
        self._sub_agents = SubAgentRunner(
            plan, self.store, self.config, self.counters, self._count_write, self.callbacks, self.executors,
            self.clock,
        )
        self.progress_enabled = self.config.get(RuntimeOptions.PROGRESS_ENABLED)
        # Cost per model call (usage.prices; checked at start by validate_options).
        self.prices = PriceTable(self.config.get(RuntimeOptions.USAGE_PRICES))
        # Checked before each model call; None (nothing checked) without budget.* options.
        self.budgets = Budgets.of(self.config, self.prices, parallelism)
        self.steering_enabled = self.config.get(RuntimeOptions.STEERING_ENABLED)
        # The keys' steering mailboxes: runs take from them, the host core
        # (runtime.keyed_host) accepts into them.
        self.mailboxes = SteeringMailboxes()
        # None unless something would be logged or told: no cost per event then.
        self.event_log = EventLog.from_config(self.config, job_id, task[0], task[1], self.counters.metrics.builtin)
        # None unless traces are asked for (OTEL_TRACES_EXPORTER, tracing.exporter).
        # Flink Agents HEAD's trace records ride on the same spans (event-log.trace.enabled).
        self.tracing = with_trace_records(job_tracing(self.config, plan, self.prices), self.config, plan,
                                          self.event_log)
        # One subtask recovers the spans a dead worker lost (otel_export).
        self._trace_recovery = (
            self.tracing.start_recovery(self.store, job_id, self.config.get(RuntimeOptions.TRACING_RECOVERY_WINDOW_S))
            if self.tracing is not None and task[1] == 0 else None
        )
        self._task = task

    def _top_journal_ids(self) -> List[str]:
        """The journals this engine's keys live in (sub-agent journals aside)."""
        return [journal_id for journal_id in self._journal_ids.copy() if "/" not in journal_id]

    def note_journal(self, journal_id: str) -> None:
        """A key of ``journal_id`` (a restored key's) is in this engine's hands."""
        if journal_id and journal_id not in self._journal_ids:
            self._journal_ids.add(journal_id)
            if self.run_control is not None and "/" not in journal_id:
                self.run_control.prime([journal_id])  # a restored key's pauses, before its records start

    def report_shared_store(self) -> List[str]:
        """At a job's start (each host calls it once; on Flink only subtask
        0 reports): warn, in one line, if the journal store holds other
        jobs' journals (``runtime.durability.shared_store``).

        Returns:
            The other journal ids found.
        """
        return report_other_journals(self.store, self.job_id) if self._task[1] == 0 else []

    async def run_to_completion(
        self, key: Any, state: KeyState, record: PendingRecord,
        emit_progress: Callable[[List[Dict[str, Any]]], None] | None = None,
    ) -> Completion:
        """Run ``record`` against ``state`` (the run's own copy of the key's
        state; its short-term memory is updated in place) and describe the
        outcome for ``apply_completions``. A failure is kept in the
        completion, not raised; a ``BaseException`` that is not an
        ``Exception`` (cancellation, a simulated crash) propagates."""
        completion = Completion(record.seq, state.short_term_memory)
        totals: List[Tuple[Any, Any]] = []
        try:
            await self.run_one(key, state, record, completion.outputs.append, completion.errors.append, emit_progress,
                               totals.append)
        except RecordParked as parked:
            completion.parked = parked
            self.counters.records_parked += 1
        except Exception as exc:
            completion.failure = exc
        if self.keep_failed and any(e.get("error_type") != "RunCancelled" for e in completion.errors):
            # Skipped to the error stream: kept in keyed state for a retry (runs retry).
            journal_seq = record.replays if record.replays is not None else record.seq
            completion.keep_failed = [journal_seq, record.value, self.clock.now_ms()]
        if totals and (totals[0][0] is not None or totals[0][1] is not None):
            # The key's totals, in its keyed state; the run's copy too, for the key's next record.
            completion.usage = state.usage = add_to_totals(state.usage, *totals[0])
        if self.budgets is not None and completion.parked is None and totals:
            # A parked record counts when it finally ends (its calls replay, counted once).
            window = self.budgets.record_finished(state.budget, *totals[0], self.clock.now_ms())
            if window is not None:
                completion.budget = state.budget = window
        completion.short_term_memory = state.short_term_memory
        completion.steering_taken_through = self.mailboxes.taken_through(key)
        return completion

    async def run_one(
        self,
        key: Any,
        state: KeyState,
        record: PendingRecord,
        emit: Callable[[Any], None],
        emit_error: Callable[[Dict[str, Any]], None],
        emit_progress: Callable[[List[Dict[str, Any]]], None] | None = None,
        totals: Callable[[Tuple[Any, Any]], None] | None = None,
    ) -> None:
        """Run one record of ``key`` against ``state`` (its short-term memory
        is updated in place; the pending queue is the caller's business).

        All or nothing per record, for outputs as for memory: the record's
        outputs go to ``emit`` only once its run finished; a run that fails
        (``fail``) or is skipped (``skip``) emits none of them, whatever its
        earlier actions sent.

        Args:
            emit_progress: Where the run's progress records go, one call per
                publish (``runtime.features.progress``); None: no progress stream.
            totals: Given the run's ``(Usage | None, cost | None)`` once it
                ended, however it ended (``token_usage.run_totals``).

        Raises:
            ActionFailed: An action failed under the ``fail`` strategy.
        """
        # A retried record continues the run (journal, callbacks, trace) of the seq it replays.
        seq = record.replays if record.replays is not None else record.seq
        identity = run = RunIdentity(state.journal_id or self.job_id, key, seq, self._text_of(key))
        progress = None if emit_progress is None else RunProgress(
            key, seq, self._counted(emit_progress), prices=self.prices, key_usage=state.usage)
        outputs: List[Any] = []  # emitted once the run finished
        self.executors.install(asyncio.get_running_loop())
        run_log = None if self.event_log is None else self.event_log.for_run(
            key, seq, self.clock.now, run.journal_id, run.key_text)
        self._journal_ids.add(run.journal_id)
        # The run's trace (runtime.features.tracing): spans of what each commit wrote.
        trace = None if self.tracing is None else self.tracing.for_run(
            self.store, run.journal_id, run.key_text, seq, key)
        on_commit = _both(_both(None if progress is None else progress.committed,
                                None if run_log is None else run_log.committed),
                          None if trace is None else trace.committed)
        if self.store.blocking_io:  # read on the io pool (RunJournal.open)
            journal = await RunJournal.open(
                self.store, run.journal_id, run.key_text, seq, self._count_write, on_commit=on_commit,
                executors=self.executors, input_digest=lambda: input_digest(record.value),
            )
        else:  # a store answering from memory: read in place, without a coroutine
            journal = RunJournal(self.store, run.journal_id, run.key_text, seq, self._count_write, on_commit=on_commit,
                                 executors=self.executors, input_digest=lambda: input_digest(record.value))
        if record.replays is not None:
            journal.reopen()  # a retry: its run end is written anew
        if trace is not None and journal.is_replay:
            if journal.is_finished:
                # A finished run commits nothing more; spans its first run
                # lost go out with the recovery (otel_export), not here: two
                # replays of it could race to export them.
                trace = None
            else:
                trace.replayed(journal.journaled_entries(), journal.trace_marks)
        if progress is not None and journal.is_replay:
            progress.replayed(journal.journaled_entries())
        self.counters.in_flight += 1
        self.counters.max_in_flight = max(self.counters.max_in_flight, self.counters.in_flight)
        completed = None
        try:
            ended = journal.finished_detail if journal.is_finished else {}
            if ended.get("outcome") == CANCELLED_OUTCOME:
                # Cancelled before a failover: end as it did, running nothing.
                raise RunCancelled(key, record.seq, _int(ended.get("control_id")), str(ended.get("requested_by", "")))
            completed = Run(
                self.plan, identity, state, journal, self._resources.get, self.config, self.counters,
                outputs.append,
                self._services_for(key),
                self.clock, run_log, trace=trace, prices=self.prices, budgets=self.budgets,
            )
            await run_record(completed, record)
        except RecordParked as parked:
            count_replayed(completed)
            # As a failure: keep what it completed, so resuming it replays
            # that; its callbacks stay pending. The runner queues it again
            # and pauses its key (runtime.features.run_control).
            try:
                journal.keep_failed_run()
            except (Exception, JournalUnavailable) as write_error:
                add_note(parked, f"keeping its journal failed too: {write_error!r}")
            if self.callbacks is not None:
                self.callbacks.forget_run(run.key_text, run.seq)
            if trace is not None:
                trace.failed(parked.failure, time.time_ns(), "parked")
            raise
        except RunCancelled as cancelled:  # a replay of a run a control request ended (nothing ran)
            emit_error(cancelled_error_record(key, record, cancelled))
            self.counters.records_cancelled += 1
        except RecordSkipped as skipped:
            count_replayed(completed)  # the tokens of steps replayed from their completion
            failure = skipped.failure
            self.counters.records_skipped += 1
            log.warning("skipped %s", failure)
            emit_error({
                "key": key,
                "seq": record.seq,
                "record": record.value,
                "action": failure.action,
                "error_type": type(failure.cause).__name__,
                "error_message": str(failure.cause),
                "attempts": skipped.attempts,
                **({"retry_of": record.replays} if record.replays is not None else {}),
            })
            await journal.finish_async("skipped", force=self._made_callbacks(run) and await self._close_callbacks(run),
                                       detail={"error": {"action": failure.action, **step_error(failure.cause)}})
            if run_log is not None:
                run_log.finished()
            if trace is not None and journal.unwritten:
                trace.ended_unwritten(journal.unwritten, "skipped", time.time_ns())
        except ActionFailed as failure:
            count_replayed(completed)
            # Keep what finished (calls, completed steps): a restart then
            # replays it instead of calling again. Its callbacks stay pending.
            try:
                journal.keep_failed_run()
            except (Exception, JournalUnavailable) as write_error:  # the record fails either way; say both
                if write_error is not failure.cause:
                    log.warning("could not keep the journal of failed %s: %r", failure, write_error)
                    add_note(failure, f"keeping its journal failed too: {write_error!r}")
            if self.callbacks is not None:
                self.callbacks.forget_run(run.key_text, run.seq)
            if progress is not None:
                progress.failed(failure)
            if trace is not None:
                trace.failed(failure, time.time_ns())
            raise
        else:
            count_replayed(completed)  # the tokens of steps replayed from their completion
            if journal.ends_unwritten and not self._made_callbacks(run):
                journal.finish_unwritten()  # the common run without calls: no coroutine to end it
            else:
                await journal.finish_async("ok", force=self._made_callbacks(run) and await self._close_callbacks(run))
            if run_log is not None:
                run_log.finished()
            if progress is not None and progress.commits == 0 and not journal.is_replay:
                progress.ended_without_commit("ok", outputs)
            if trace is not None and journal.unwritten:
                trace.ended_unwritten(journal.unwritten, "ok", time.time_ns())
            for output in outputs:
                emit(output)
            self.counters.outputs += len(outputs)
        finally:
            if totals is not None and completed is not None:
                totals(run_totals(completed))
            self.counters.in_flight -= 1
            self.counters.calls_executed += journal.calls_executed
            self.counters.calls_replayed += journal.calls_replayed
            self.counters.calls_reconciled += journal.calls_reconciled
        self.counters.records += 1
        prune_before_s = self._prune_due()
        if prune_before_s is not None:  # once per prune interval: no coroutine per record otherwise
            await self._prune_finished(prune_before_s)

    def _text_of(self, key: Any) -> str:
        """``key_text(key)``, kept for str keys (the common case; its JSON
        text needs a ``json.dumps`` per run otherwise). Only exact ``str``:
        equal keys of other types (``1``, ``1.0``, ``True``) have other texts."""
        if type(key) is not str:
            return key_text(key)
        text = self._key_texts.get(key)
        if text is None:
            if len(self._key_texts) >= _KEY_TEXTS_KEPT:
                self._key_texts.clear()
            text = self._key_texts[key] = key_text(key)
        return text

    async def end_cancelled(self, key: Any, state: KeyState, record: PendingRecord,
                            cancelled: RunCancelled) -> Completion:
        """End ``record``'s run as cancelled by a control request (its task
        was cancelled, or it never started): its pending callbacks close and
        its journal gets a run end naming the request, so a replay after a
        failover ends the same way without running anything; its completion
        carries the cancelled error record and the key's memory as it was
        before the record (all or nothing per record)."""
        run = RunIdentity(state.journal_id or self.job_id, key, record.seq)
        journal = await RunJournal.open(self.store, run.journal_id, run.key_text, record.seq, self._count_write,
                                        executors=self.executors)
        if not journal.is_finished:
            await journal.finish_async(CANCELLED_OUTCOME, force=True, detail={
                "control_id": cancelled.control_id, "requested_by": cancelled.requested_by})
            await self._close_callbacks(run)
        self.counters.records_cancelled += 1
        completion = Completion(record.seq, state.short_term_memory)
        completion.errors.append(cancelled_error_record(key, record, cancelled))
        completion.steering_taken_through = self.mailboxes.taken_through(key)
        return completion

    def _services_for(self, key: Any) -> RunServices:
        """A run's services: without steering the same for every run, so
        made once (again if the callback hub was replaced)."""
        if self.steering_enabled:
            return RunServices(self._sub_agents, self.callbacks, self.mailboxes.get(key))
        services = self._shared_services
        if services is None or services.callbacks is not self.callbacks:
            services = self._shared_services = RunServices(self._sub_agents, self.callbacks, None)
        return services

    def _made_callbacks(self, run: RunIdentity) -> bool:
        """Whether the run has callbacks to close (``_close_callbacks``);
        asked first, so a run without any awaits no coroutine for them."""
        return self.callbacks is not None and self.callbacks.made_callbacks(run.key_text, run.seq)

    async def _close_callbacks(self, run: RunIdentity) -> bool:
        """Close the run's callbacks still pending; whether it made any (its
        run end must then be written: callbacks are pruned by it)."""
        # Before the run-end marker: a completion of a callback the run left
        # behind is late from here on, also if the marker write is lost.
        if self.callbacks is None:
            return False
        return await self.callbacks.close_run(run.journal_id, run.key_text, run.seq)

    def _counted(self, publish: Callable[[List[Dict[str, Any]]], None]) -> Callable[[List[Dict[str, Any]]], None]:
        def counted(records: List[Dict[str, Any]]) -> None:
            self.counters.progress_publishes += 1
            publish(records)

        return counted

    def _count_write(self) -> None:
        self.counters.journal_writes += 1

    def _prune_due(self) -> float | None:
        """When a prune interval has passed since the last prune: mark this
        one and return the time (Unix s) before which finished runs go;
        else None."""
        now = self.clock.now()
        if now - self._last_prune < self._prune_interval_s:
            return None
        self._last_prune = now
        return now - self._retention_s

    async def _prune_finished(self, finished_before_s: float) -> None:
        """Prune runs finished before ``finished_before_s``, on the io pool
        (a large prune must not hold the loop's thread). Housekeeping: a
        failure is logged and counted (``prune_failures``), the record that
        happened to trigger it stands, and the next interval tries again; a
        store that is really gone fails the next journal read or write of a
        run."""
        try:
            await self.executors.io(self._prune, finished_before_s, sorted(self._journal_ids))
        except Exception as error:
            self.counters.prune_failures += 1
            log.warning("pruning the journal failed (tried again in %.0f s): %r", self._prune_interval_s, error)

    def _prune(self, finished_before_s: float, journal_ids: List[str]) -> None:
        """Prune the finished runs of each of ``journal_ids`` (the engine's
        own journals), callbacks first: they are found by the run-end markers."""
        for journal_id in journal_ids:
            if self.callbacks is not None:
                self.callbacks.prune(finished_before_s, journal_id)
            deleted = self.store.prune(finished_before_s, journal_id)
            if deleted:
                log.info("pruned %d journal entries of journal %r of runs finished over %.0f s ago",
                         deleted, journal_id, self._retention_s)

    def close(self) -> None:
        """Close the agent's resources, and the journal store if the engine
        opened it."""
        try:
            self._resources.close()
            self._sub_agents.close()
        finally:
            self.executors.close()
            if self.event_log is not None:
                self.event_log.close()
            if self._trace_recovery is not None:
                self._trace_recovery.set()
            if self.tracing is not None:
                # Before the store closes: an export's marks go to the store.
                if not self.tracing.sink.flush(10.0):
                    log.warning("spans still queued for export after 10 s at close; they may be lost")
            if self._owns_store:
                self.store.close()


CANCELLED_OUTCOME = "cancelled"  # the run end of a run a control request cancelled


def cancelled_error_record(key: Any, record: PendingRecord, cancelled: RunCancelled) -> Dict[str, Any]:
    """The error-stream record of a cancelled run (the shape of a skipped one)."""
    return {"key": key, "seq": record.seq, "record": record.value, "action": None,
            "error_type": "RunCancelled", "error_message": str(cancelled), "attempts": 0}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _both(first: Callable[[Any], None] | None, second: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One ``on_commit`` calling ``first`` then ``second`` (either may be None)."""
    if first is None or second is None:
        return first or second

    def both(entries: Any) -> None:
        first(entries)
        second(entries)

    return both
