"""``ActionContext``: the ``RunnerContext`` one action invocation sees."""

from __future__ import annotations

import asyncio
import inspect
import weakref
from typing import Any, Awaitable, Callable, Dict, List, Set

from pydantic import BaseModel

from flink_agents.api.callbacks import Callback
from flink_agents.api.configuration import ReadableConfiguration, readable
from flink_agents.api.embedding_models.embedding_model import BaseEmbeddingModelSetup
from flink_agents.api.events.event import Event
from flink_agents.api.memory_object import MemoryObject
from flink_agents.api.metric_group import MetricGroup
from flink_agents.api.resource import Resource, ResourceType
from flink_agents.api.vector_stores.vector_store import BaseVectorStore
from flink_agents.api.runner_context import AsyncExecutionResult, RunnerContext
from flink_agents.plan.agent_plan import ActionSpec
from flink_agents.runtime.durability.call_position import TaskScope, position
from flink_agents.runtime.durability.call_threads import run_in_thread
from flink_agents.runtime.durability.ids import (
    RunIdentity,
    callback_ref,
    session_path,
    sub_agent_call_id,
    vector_store_document_id,
)
from flink_agents.runtime.durability.journal import args_digest, function_id_of
from flink_agents.runtime.execution.event_codec import check_event
from flink_agents.runtime.execution.extensions import EXTENSIONS
from flink_agents.runtime.execution.memory import MemoryNode, StagedMemory
from flink_agents.runtime.execution.resources import JournaledEmbeddingModel
from flink_agents.runtime.execution.run import Run
from flink_agents.runtime.execution.token_usage import count_model_call, count_sub_agent
from flink_agents.stores.callbacks import CallbackRef

__all__ = ["ActionContext"]


class ActionContext(RunnerContext):
    """Context of one action invocation (one step); valid only while it runs.

    Sent events and memory writes are staged here; the action loop applies
    them only when the action returns without raising. Journaled calls
    (``durable_execute*``, the built-in model and tool calls, sub-agent
    submits, steering takes) and callbacks get positions that follow the
    program's structure: per task of the action, in the order that task makes
    them (``runtime.durability.call_position``), never in completion order.

    Args:
        run: The record's run (``runtime.execution.run.Run``).
        step: This invocation's step (``"<action>@<event index>"``).
        spec: The action.
        sensory: The action's staged sensory memory.
        short_term: The action's staged short-term memory.
    """

    def __init__(
        self, run: Run, step: str, spec: ActionSpec, sensory: StagedMemory, short_term: StagedMemory,
        trigger_event_id: Any = None,
    ) -> None:
        self.runtime_run = run
        # Lineage of the events this action sends: the id of the event it runs on.
        self.trigger_event_id = trigger_event_id
        # The action's long-term memory operations, when long-term memory
        # events are on (runtime.execution.memory_events; the long_term_memory
        # hook wraps the memory to record them); None: not recorded.
        self.ltm_observations: Any = None
        self._run = run.identity
        self.step = step
        self.action_name = spec.name
        self._action_config = spec.config
        self.sensory = sensory
        self.short_term = short_term
        self._resources = run.resources
        self._job_config = run.config
        self._journal = run.journal
        self.root_scope = TaskScope(weakref.ref(self))  # the action's own task (runtime.durability.call_position)
        self._is_async = spec.function.is_async
        self._sub_agents = run.services.sub_agents
        self._callbacks = run.services.callbacks
        self._steering = run.services.steering
        self._session_turns: Dict[str, asyncio.Lock] = {}  # explicit session id -> one call at a time
        self.active = True  # cleared by the action loop when the action returns
        self.sent_events: List[Event] = []
        # Indexes in sent_events of events a built-in action made (a model's
        # reply): encoded when the action returns, never deferred (encode_sent).
        self.runtime_sent: Set[int] = set()
        # Filled by the action loop when the action returned: each event encoded, or deferred (encode_sent).
        self.encoded_events: List[Any] = []

    @property
    def key(self) -> Any:
        return self._run.key

    @property
    def seq(self) -> int:
        """Sequence number of the record being processed (per key, from 0)."""
        return self._run.seq

    def send_event(self, event: Event) -> None:
        """Stage ``event``; it is queued when the action returns.

        Its values are checked here, by the codec that journals it
        (``runtime.execution.event_codec``), so a value the codec refuses
        fails this call, in the action, under its error strategy. The event
        is journaled, and reaches its listeners, as it is when the action
        returns (it is encoded then, or when first read: ``encode_sent``).
        Its lineage is set here: ``upstream_event_id`` is the id of the
        event this action runs on, ``upstream_action_name`` this
        action's name (the action loop encodes it then; a value changed in
        between is checked there, with the same error).

        Raises:
            TypeError: ``event`` is not an ``Event``, or a value in it cannot
                be journaled; an ``EncodeError`` names the field path
                (``event OutputEvent.output.items[2]``) and the value's type.
                The action loop's ``ActionFailed`` adds action, key and record.
        """
        if not isinstance(event, Event):
            raise TypeError(
                f"action {self.action_name!r} sent a {type(event).__name__}; send_event takes an Event"
            )
        self._stage(event)
        check_event(event)  # the loop encodes it when the action returned, or when first read
        self.sent_events.append(event)

    def send_runtime_event(self, event: Event) -> None:
        """``send_event`` for an event a built-in action made (a model's
        reply): staged without the codec check, which only moves where a
        refused value raises into the action, for user code that would catch
        it. The loop encodes the event when the action returns, and a value
        it refuses fails the action there, with the same error."""
        self._stage(event)
        self.runtime_sent.add(len(self.sent_events))
        self.sent_events.append(event)

    def _stage(self, event: Event) -> None:
        # Lineage (Flink Agents HEAD): framework-owned, so whatever the event
        # carried is overwritten; journaled with it, so a replay reads it back.
        _stamp(event, self._run.event_id(self.step, len(self.sent_events)), self.trigger_event_id, self.action_name)

    @property
    def sensory_memory(self) -> MemoryObject:
        return MemoryNode(self.sensory)

    @property
    def short_term_memory(self) -> MemoryObject:
        return MemoryNode(self.short_term)

    def get_resource(self, name: str, type: ResourceType, metric_group: MetricGroup | None = None) -> Resource:
        """The resource ``name`` of kind ``type``. An embedding model setup
        comes as a ``JournaledEmbeddingModel`` bound to this invocation: its
        ``embed``/``aembed`` calls are journaled (``embed:<name>``); a vector
        store as a ``JournaledVectorStore``, every call journaled."""
        resource = self._resources(name, type)
        bind = getattr(resource, "set_metric_group", None)  # a sub-agent handle has none
        if bind is not None:
            bind(metric_group if metric_group is not None else self.action_metric_group)
        if isinstance(resource, BaseEmbeddingModelSetup):
            journaled = JournaledEmbeddingModel(resource, name, self.journaled_call_sync, self.journaled_call)
            return journaled  # type: ignore[return-value]
        if isinstance(resource, BaseVectorStore):
            from flink_agents.runtime.execution.journaled_vector_store import JournaledVectorStore

            def new_ids(count: int) -> List[str]:
                step, ordinal = self._next_position("vector_store_ids")
                return [vector_store_document_id(self._run, name, step, ordinal, i) for i in range(count)]

            return JournaledVectorStore(  # type: ignore[return-value]
                resource, name, self.journaled_call_sync, self.journaled_call, new_ids=new_ids
            )
        return resource

    @property
    def long_term_memory(self) -> Any:
        """See ``RunnerContext.long_term_memory`` (the ``long_term_memory`` hook
        of ``runtime.execution.extensions``: ``runtime.features.long_term_memory``)."""
        return EXTENSIONS.context_hook("long_term_memory")(self)

    @property
    def config(self) -> ReadableConfiguration:
        return readable(self._job_config)

    @property
    def action_config(self) -> Dict[str, Any]:
        return dict(self._action_config)

    @property
    def agent_metric_group(self) -> MetricGroup:
        """The engine's metric registry root (``runtime.execution.metrics``)."""
        return self.runtime_run.counters.metrics.root

    @property
    def action_metric_group(self) -> MetricGroup:
        """``action.<this action>`` of the engine's metric registry."""
        return self.runtime_run.counters.metrics.builtin.action_group(self.action_name)

    def _next_position(self, kind: str = "call") -> tuple[str, int]:
        """``(journal step, ordinal)`` of the running task's next ``kind``."""
        return position(self, self.step, kind)

    def durable_execute(
        self, func: Callable[..., Any], *args: Any, reconciler: Callable[[], Any] | None = None, **kwargs: Any
    ) -> Any:
        """Journaled ``func(*args, **kwargs)``: on replay the journaled result is
        returned (or its exception re-raised) without calling ``func``.

        ``reconciler`` (Flink Agents 0.3.1; keyword-only, never passed to
        ``func``): a zero-argument callable. Given, the call's "started"
        mark is committed to the run's journal before ``func`` runs (one
        write at most); if a failover cut the call off after that and
        before its outcome was journaled, the replay calls ``reconciler()``
        instead of ``func``: what it returns is the call's result, what it
        raises the call's failure (noted with the call), journaled and
        replayed like ``func``'s (``runtime.durability.call_started``). The
        reconciler asked is the one passed on the replay.

        Raises:
            TypeError: ``func`` is a coroutine function; ``reconciler`` is not
                a zero-argument callable, or a coroutine function; or the
                result cannot be journaled.
            NondeterminismError: On replay, the journal recorded another call here.
        """
        _check_reconciler(reconciler, func, is_async=False)
        if inspect.iscoroutinefunction(func):
            raise TypeError(
                f"durable_execute got coroutine function {func.__qualname__}; "
                "use 'await ctx.durable_execute_async(...)' in an async action"
            )
        return self._journal.call_sync(
            *self._next_position(), function_id_of(func), args_digest(*args, **kwargs),
            lambda: func(*args, **kwargs), reconcile=reconciler,
        )

    def durable_execute_async(
        self, func: Callable[..., Any], *args: Any, reconciler: Callable[[], Any] | None = None, **kwargs: Any
    ) -> AsyncExecutionResult:
        """Async ``durable_execute``: a coroutine function is awaited, a plain
        one runs on a worker thread (``call_threads.run_in_thread``: if the
        action is cancelled meanwhile, the thread's outcome is kept for the
        retry). Nothing happens until the returned
        ``AsyncExecutionResult`` is awaited (as in Flink Agents 0.3.1); the
        journal position is taken then. ``reconciler`` as for
        ``durable_execute``; a coroutine function is awaited, a plain one
        runs on a worker thread, as ``func``.

        Raises:
            TypeError: ``reconciler`` is not a zero-argument callable.
        """
        _check_reconciler(reconciler, func, is_async=True)

        async def run() -> Any:
            if inspect.iscoroutinefunction(func):
                return await func(*args, **kwargs)
            return await run_in_thread(func, *args, **kwargs)  # outlives a timeout: the retry waits for it

        async def reconcile() -> Any:
            assert reconciler is not None  # only passed when given
            if inspect.iscoroutinefunction(reconciler):
                return await reconciler()
            return await run_in_thread(reconciler)

        async def journaled() -> Any:
            step, ordinal = self._next_position()
            return await self._journal.call(
                step, ordinal, function_id_of(func), args_digest(*args, **kwargs), run, alive=self._alive,
                reconcile=None if reconciler is None else reconcile,
            )

        return AsyncExecutionResult.deferred(journaled)

    async def journaled_call(
        self, function_id: str, digest_args: Any, run: Callable[[], Awaitable[Any]],
        count: Callable[[Any], None] | None = None,
    ) -> Any:
        """Runtime-internal: journal a built-in call (model, tool).

        Args:
            count: ``count(result, (step, ordinal))`` counts the call's
                usage in the metrics from its result (the chat action's:
                ``token_usage.count_tokens``, which counts a position once
                per run of the record in this engine), whether the result
                came from the call or from the journal, so a replay after
                a restart counts what the restarted engine's metrics would
                otherwise miss, and a retried action, replaying what its
                failed attempt counted, counts nothing twice.
        """
        step, ordinal = self._next_position()
        self._check_budgets(function_id, step, ordinal)
        trace = self.runtime_run.trace
        if trace is not None and trace.captures_content and function_id.startswith("chat:"):
            trace.note_prompt(step, ordinal, digest_args[0])  # the messages asked (not journaled: for the span)
        result = await self._journal.call(step, ordinal, function_id, args_digest(digest_args), run, alive=self._alive)
        if count is not None:
            count(result, (step, ordinal))
        return result

    @property
    def is_async(self) -> bool:
        """Seam (``runtime.durable``): whether the action is ``async def`` (it runs on
        the run's event loop, where journaled calls may be awaited)."""
        return self._is_async

    def anchor(self, kind: str) -> str:
        """Seam (``runtime.durable``): a journal step of its own for a unit of work
        started here (an agent framework's turn): ``"<step of the running
        task>/<kind><n>"``, ``n`` counting the running task's ``kind`` units.

        Calls inside the unit are then placed by what they are (the unit's
        model request 2, its tool call ``fa-..-1-0``) with
        ``journaled_call_at``, not by the task that happens to make them: a
        framework's internal task layout (pools, lazily created tasks) does
        not move them (``integrations.frameworks.durable_turn``).

        Raises:
            ValueError: ``kind`` is not an identifier (a digit would collide
                with the task-scope paths of ``call_position``).
        """
        if not kind.isidentifier():
            raise ValueError(f"anchor kind must be an identifier, got {kind!r}")
        step, ordinal = self._next_position(kind)
        return f"{step}/{kind}{ordinal}"

    async def journaled_call_at(
        self, step: str, function_id: str, digest_args: Any, run: Callable[[], Awaitable[Any]],
        count_usage: bool = False,
    ) -> Any:
        """Seam (``runtime.durable``): ``journaled_call`` at an explicit position
        (``step`` under an ``anchor``, ordinal 0).

        Args:
            count_usage: The call is a model request (``chat:...``) whose
                result, a dict, may carry ``usage`` and ``model``: count
                them in the metrics once per run, run or replayed
                (``runtime.execution.token_usage``).
        """
        self._check_under_step(step)
        if count_usage:
            self._check_budgets(function_id, step, 0)
        result = await self._journal.call(step, 0, function_id, args_digest(digest_args), run, alive=self._alive)
        if count_usage and isinstance(result, dict):
            count_model_call(self.runtime_run, self.action_name, (step, 0), result,
                             function_id.partition(":")[2] or function_id)
        return result

    def _check_budgets(self, function_id: str, step: str, ordinal: int) -> None:
        """Before a model call (``chat:...``) that would run, not replay:
        the run's budgets (``runtime.features.budgets``; raises
        ``BudgetExceeded``)."""
        budgets = self.runtime_run.budgets
        if budgets is not None and function_id.startswith("chat:") and not self._journal.holds(step, ordinal):
            budgets.check(self.runtime_run)

    def record_at(self, step: str, function_id: str, produce: Callable[[], Any]) -> Any:
        """Seam (``runtime.durable``): journal a value the run decides itself (a
        framework turn's start: its run id and clock) at ``step``; a replay
        returns the journaled value. Commits with the run's next write."""
        self._check_under_step(step)
        return self._journal.record(step, 0, function_id, produce)

    def take_steering_at(self, step: str) -> List[Any]:
        """Seam (``runtime.durable``): ``take_steering`` journaled at ``step``."""
        if self._steering is None:
            return []
        self._check_under_step(step)
        taken = self._journal.record(step, 0, "steering:take", self._steering.take)
        self._steering.mark_taken(taken)
        return [message for _, message in taken]

    def _check_under_step(self, step: str) -> None:
        if not step.startswith(f"{self.step}/"):
            raise ValueError(f"journal step {step!r} is not under action step {self.step!r}")
        if not self.active:
            raise RuntimeError(f"journaled call at {step!r} after action {self.action_name!r} returned")

    def journaled_call_sync(self, function_id: str, digest_args: Any, run: Callable[[], Any]) -> Any:
        """Seam (``runtime.durable``): ``journaled_call`` for a synchronous
        ``run()``, at the running task's next position (a memory backend's
        calls, the journaled embedding model and vector store)."""
        return self._journal.call_sync(*self._next_position(), function_id, args_digest(digest_args), run)

    def _alive(self) -> bool:
        return self.active

    @property
    def run_identity(self) -> RunIdentity:
        return self._run

    def submit_sub_agent(self, handle: Any, prompt: Any, session_id: str | None, call_id: str | None) -> Any:
        """Runtime-internal: ``SubAgentHandle.submit``. Ids and the journal
        position are taken now, in the submitting task's own order
        (``runtime.durability.call_position``), so a replay derives the same.

        Raises:
            RuntimeError: The action has returned, or is not async.
        """
        if not self.active:
            raise RuntimeError(
                f"sub-agent {handle.name!r} submitted after action {self.action_name!r} returned; "
                "submit and await it inside the action"
            )
        if not self._is_async:
            raise RuntimeError(
                f"action {self.action_name!r} is not async: a sub-agent call must be awaited, so the "
                f"action calling {handle.name!r} must be 'async def'"
            )
        if self._sub_agents is None:
            raise RuntimeError("this runtime context cannot run sub-agents")
        step, ordinal = self._next_position()
        id_step, id_ordinal = self._next_position("sub_agent")
        explicit = session_id is not None
        call_id = call_id or sub_agent_call_id(self._run, id_step, handle.name, id_ordinal)
        session = session_id or call_id
        digest = args_digest(prompt, session_id, call_id)

        ran = False

        async def run_child() -> Any:
            nonlocal ran
            ran = True
            return await self._sub_agents.run(self, handle, prompt, session, call_id, explicit)

        async def call() -> Any:
            outcome = await self._journal.call(
                step, ordinal, f"agent:{handle.name}", digest, run_child, alive=self._alive,
            )
            # The child's tokens: counted by the child as it ran, else (its
            # result replayed) from the journal; once per run either way.
            count_sub_agent(self.runtime_run, (step, ordinal), outcome, ran)
            await self._journal.keep_sub_agent_result()
            if outcome["session_memory"] is not None:
                self.short_term_memory.set(session_path(session), outcome["session_memory"])
            return outcome["result"]

        if not explicit:
            return call()  # a fresh session: no other call shares its memory
        return self._one_at_a_time(session, call)

    async def _one_at_a_time(self, session: str, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``call`` (a sub-agent call on the explicit ``session``) when
        no other call of this action on the session runs: calls on one
        session take turns, in the order they start (a ``gather`` starts
        them in argument order), each reading the session's memory as the
        previous one left it. So no write is lost, and a replay, whose
        journaled calls return in the same order, reads and leaves the
        same memory (docs/durability.md, "Same-session calls")."""
        turn = self._session_turns.get(session)
        if turn is None:
            turn = self._session_turns[session] = asyncio.Lock()  # FIFO: waiters wake in arrival order
        async with turn:
            return await call()

    def create_callback(  # type: ignore[override]
        self, purpose: str, timeout_s: float, *, details: str | None = None, keep_stored_timeout: bool = False
    ) -> Awaitable[Callback]:
        """A callback bound to this call (see ``flink_agents.api.callbacks``).
        Runtime-internal keywords (a tool call's approval uses them):
        ``details``, JSON text a reviewer sees, stored with it;
        ``keep_stored_timeout``, a replay keeps the first deadline when
        ``timeout_s`` (from configuration) changed since
        (``CallbackHub.create``).

        Checked at once (so a sync action gets the error, not an unawaited
        coroutine); the returned awaitable registers the callback durably
        before it gives it; on replay the original callback (id, deadline,
        outcome) comes back.

        Raises:
            ValueError: ``timeout_s`` outside [1, 86400] s.
            RuntimeError: The action is not async or has returned, or this
                runtime has no callback store.
            NondeterminismError: On replay, this call created another callback.
        """
        EXTENSIONS.context_hook("callback_timeout")(timeout_s)  # bad input fails before anything else
        if not self.active:
            raise RuntimeError(
                f"create_callback called after action {self.action_name!r} returned; "
                "create and await callbacks inside the action"
            )
        if not self._is_async:
            raise RuntimeError(
                f"action {self.action_name!r} is not async: a callback must be awaited, so the "
                "action creating it must be 'async def'"
            )
        if self._callbacks is None:
            raise RuntimeError("this runtime context cannot create callbacks")
        return self._create_callback(*self._next_position("callback"), purpose, timeout_s, details,
                                     keep_stored_timeout)

    def create_callback_at(
        self, step: str, purpose: str, timeout_s: float, *, details: str | None = None,
        keep_stored_timeout: bool = False,
    ) -> Awaitable[Callback]:
        """Seam (``runtime.durable``): ``create_callback`` at an explicit
        position (``step`` under an ``anchor``, ordinal 0), so a framework
        can name a wait by its meaning (a LangGraph interrupt of a node)
        instead of its order in the task.

        Raises:
            ValueError: ``timeout_s`` outside [1, 86400] s; ``step`` is not
                under the action's step.
            RuntimeError: As ``create_callback``.
        """
        EXTENSIONS.context_hook("callback_timeout")(timeout_s)
        self._check_under_step(step)
        if not self._is_async:
            raise RuntimeError(f"action {self.action_name!r} is not async: a callback must be awaited")
        if self._callbacks is None:
            raise RuntimeError("this runtime context cannot create callbacks")
        return self._create_callback(step, 0, purpose, timeout_s, details, keep_stored_timeout)

    def _create_callback(
        self, step: str, ordinal: int, purpose: str, timeout_s: float, details: str | None,
        keep_stored_timeout: bool,
    ) -> Awaitable[Callback]:
        trace = self.runtime_run.trace
        return self._callbacks.create(
            self.callback_ref(ordinal, step), self._run.key, purpose, timeout_s, before_wait=self.commit_journal,
            on_waited=None if trace is None else lambda record: trace.callback_waited(
                step, ordinal, record.purpose, record.created_ms, record.completed_ms or record.created_ms,
                record.state),
            details=details, keep_stored_timeout=keep_stored_timeout,
        )

    def callback_ref(self, ordinal: int = 0, step: str | None = None) -> CallbackRef:
        """Runtime-internal: the ref of callback ``ordinal`` of ``step``
        (default: this action's own task)."""
        return callback_ref(self._run, step or self.step, ordinal)

    @property
    def callbacks(self) -> Any:
        """Runtime-internal: the engine's ``CallbackHub`` (or None)."""
        return self._callbacks

    def take_steering(self) -> List[Any]:
        """The steering messages waiting for this key, in order, taken now
        (``runtime.features.steering``); journaled in this step, so a replay takes
        the same ones here. ``[]`` when the job has no steering input."""
        if self._steering is None:
            return []
        taken = self._journal.record(*self._next_position(), "steering:take", self._steering.take)
        self._steering.mark_taken(taken)
        return [message for _, message in taken]

    async def commit_journal(self) -> None:
        """Runtime-internal: make everything journaled so far durable now,
        before the run parks on an outside event (``RunJournal.before_wait``)."""
        await self._journal.before_wait()


def _check_reconciler(reconciler: Callable[[], Any] | None, func: Callable[..., Any], is_async: bool) -> None:
    """Check a ``reconciler=`` before the call is made (Flink Agents 0.3.1
    checks the same: callable, no arguments), so a wrong one fails the
    first run, not the recovery that would need it.

    Raises:
        TypeError: ``reconciler`` is not callable, needs arguments, or is a
            coroutine function given to the synchronous ``durable_execute``;
            names ``func``.
    """
    if reconciler is None:
        return
    name = getattr(func, "__qualname__", repr(func))
    if not callable(reconciler):
        raise TypeError(f"durable call of {name!r}: reconciler must be callable, got {type(reconciler).__name__}")
    try:
        inspect.signature(reconciler).bind()
    except TypeError:
        raise TypeError(f"durable call of {name!r}: reconciler must be a callable that takes no arguments") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): it is called as given
    if not is_async and inspect.iscoroutinefunction(reconciler):
        raise TypeError(
            f"durable call of {name!r}: reconciler is a coroutine function; durable_execute calls it "
            "synchronously, so use 'await ctx.durable_execute_async(..., reconciler=...)' in an async action"
        )


_STAMPED = ("id", "upstream_event_id", "upstream_action_name")
_PLAIN_SETATTR: Dict[type, bool] = {}  # event class -> whether its setattr only stores (see _stamp)


def _stamp(event: Event, event_id: Any, upstream_event_id: Any, upstream_action_name: str) -> None:
    """Set an event's id and lineage. Where its class assigns fields as
    pydantic's ``BaseModel.__setattr__`` does without ``validate_assignment``
    or ``frozen`` (model or field; the value into ``__dict__``, the name
    into the fields set), that is done here directly: three setattr calls through pydantic
    cost more than the rest of sending a small event. Any other class goes
    through its own setattr (a frozen event fails as it did)."""
    cls = type(event)
    plain = _PLAIN_SETATTR.get(cls)
    if plain is None:
        config, fields = cls.model_config, cls.model_fields
        plain = (cls.__setattr__ is BaseModel.__setattr__
                 and not config.get("validate_assignment") and not config.get("frozen")
                 and not any(fields[name].frozen for name in _STAMPED))
        if len(_PLAIN_SETATTR) >= 4096:
            _PLAIN_SETATTR.clear()
        _PLAIN_SETATTR[cls] = plain
    if not plain:
        event.id = event_id
        event.upstream_event_id = upstream_event_id
        event.upstream_action_name = upstream_action_name
        return
    state = event.__dict__
    state["id"] = event_id
    state["upstream_event_id"] = upstream_event_id
    state["upstream_action_name"] = upstream_action_name
    event.__pydantic_fields_set__.update(_STAMPED)
