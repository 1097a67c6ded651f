"""Sub-agent calls: a child agent's plan run in-process as an isolated,
durable child of the calling action.

Identity. A call's ``call_id`` is a UUIDv5 of (journal id, key, record
sequence, calling step with the submitting task's branch path, child
resource name, ordinal of that task's sub-agent submits;
``runtime.durability.ids.sub_agent_call_id``); ``session_id`` defaults to it. Both are derived
when ``submit`` is called, so a replay derives the same ids whatever order
concurrent branches submit in.

Durability. The child's own calls are journaled under the journal id
``<parent journal id>/<call_id>``, and the child's result is journaled in the
parent's step as call ``agent:<name>``: a replay of a finished call returns
that result without running the child; a replay of a call interrupted midway
runs the child again, whose journal replays the calls it had made.

Isolation. The child runs its own action loop with its own sensory memory,
its own short-term memory (empty for a fresh session; an explicit
``session_id`` keeps it in the parent key's state under the reserved path
``_flink_agents.sessions``), its own resources, and its events never reach the
parent. A failing child gives ``SubAgentResult(success=False)``.

Same session. Calls of one action on one explicit ``session_id`` run one at
a time, in the order they start (``ActionContext.submit_sub_agent``): each
reads the session's memory here as the previous call left it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict

from flink_agents.api.agents.sub_agent import SubAgentHandle, SubAgentResult
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.errors import ActionFailed, JournalUnavailable, NondeterminismError, RecordSkipped
from flink_agents.runtime.durability.ids import SESSIONS_PATH, RunIdentity, session_path, sub_agent_journal_id
from flink_agents.runtime.execution.resources import ResourceCache
from flink_agents.runtime.execution.run import SYSTEM_CLOCK, Run, RunServices
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.runtime.execution.token_usage import count_replayed

if TYPE_CHECKING:
    from flink_agents.runtime.execution.context import ActionContext
    from flink_agents.runtime.execution.metrics import RunCounters
    from flink_agents.stores.journal import JournalStore

__all__ = ["SESSIONS_PATH", "SubAgentRunner", "LocalSubAgentHandle"]


class LocalSubAgentHandle(SubAgentHandle):
    """The handle of the AGENT resource ``name`` (plan ``child_key``)."""

    def __init__(self, name: str, child_key: str) -> None:
        self.name = name
        self.child_key = child_key

    def submit(self, ctx: Any, prompt: Any, session_id: str | None = None, call_id: str | None = None):
        submit = getattr(ctx, "submit_sub_agent", None)
        if submit is None:
            raise RuntimeError(
                f"sub-agent {self.name!r}: submit() needs the calling action's ctx, got {type(ctx).__name__}"
            )
        return submit(self, prompt, session_id, call_id)

    def open(self) -> None:
        """Nothing to open: the child's resources open on first use."""

    def close(self) -> None:
        """Nothing to close: the runner closes the child's resources."""


class SubAgentRunner:
    """Runs child plans of one root plan; one per engine.

    Args:
        root: The root plan (holds every child plan).
        store: The journal store.
        config: The job's agent configuration.
        counters: The engine's counters (children count in them too).
        on_write: Called after each journal write.
        callbacks: The engine's ``CallbackHub`` (children create callbacks too).
        executors: The engine's thread pools (``runtime.scheduling.executors``).
        clock: The engine's clock (``runtime.execution.run.Clock``).
    """

    def __init__(self, root: AgentPlan, store: "JournalStore", config: Dict[str, Any],
                 counters: "RunCounters", on_write: Any, callbacks: Any = None, executors: Any = None,
                 clock: Any = None) -> None:
        self._root = root
        self._store = store
        self._config = config
        self._counters = counters
        self._on_write = on_write
        self._callbacks = callbacks
        self._executors = executors
        self._clock = clock or SYSTEM_CLOCK
        self._resources: Dict[str, ResourceCache] = {}

    def resources_of(self, child_key: str) -> ResourceCache:
        cache = self._resources.get(child_key)
        if cache is None:
            cache = self._resources[child_key] = ResourceCache(self._root.children[child_key])
        return cache

    async def run(self, parent: "ActionContext", handle: LocalSubAgentHandle, prompt: Any,
                  session_id: str, call_id: str, explicit_session: bool) -> Dict[str, Any]:
        """Run the child once; its failures become a failed result.

        Returns:
            ``{"result": SubAgentResult, "session_memory": dict | None,
            "tokens": [[action, model, prompt, completion[, cached,
            reasoning]], ...]}``: what the
            parent journals (the session memory and the child's tokens are
            re-applied on replay; ``runtime.execution.token_usage``).
        """
        from flink_agents.runtime.execution.action_loop import run_record
        from flink_agents.runtime.durability.journal import RunJournal

        identity = parent.run_identity
        run = RunIdentity(sub_agent_journal_id(identity, call_id), identity.key, identity.seq)
        memory: Dict[str, Any] = {}
        if explicit_session:
            memory = parent.short_term_memory.get(session_path(session_id)) or {}
        state = KeyState(journal_id=run.journal_id, short_term_memory=memory)
        # Traced, its spans go under the call's span in the parent's trace.
        parent_trace = parent.runtime_run.trace
        trace = None if parent_trace is None else parent_trace.child(self._store, run.journal_id, call_id)
        journal = await RunJournal.open(self._store, run.journal_id, run.key_text, run.seq, self._on_write,
                                        on_commit=None if trace is None else trace.committed,
                                        executors=self._executors)
        if trace is not None and journal.is_replay:
            trace.replayed(journal.journaled_entries(), journal.trace_marks)
        outputs: list = []
        child = Run(
            self._root.children[handle.child_key], run, state, journal,
            self.resources_of(handle.child_key).get, self._config, self._counters, outputs.append,
            RunServices(sub_agents=self, callbacks=self._callbacks),  # no steering inside a child
            self._clock, trace=trace, prices=parent.runtime_run.prices,
        )
        try:
            await run_record(child, PendingRecord(run.seq, prompt))
        except (ActionFailed, RecordSkipped) as exc:
            failure = exc.failure if isinstance(exc, RecordSkipped) else exc
            if isinstance(failure.cause, (NondeterminismError, JournalUnavailable)):
                raise  # not the child's failure: the parent's record fails
            await journal.settle_async()
            count_replayed(child)
            cause = failure.cause
            result = SubAgentResult(
                success=False, error_message=f"{type(cause).__name__}: {cause}",
                session_id=session_id, call_id=call_id,
            )
            return {"result": result, "session_memory": None, "tokens": child.tokens}
        await journal.settle_async()
        count_replayed(child)  # the tokens of the child's steps replayed from their completion
        result = SubAgentResult(success=True, result=outputs, session_id=session_id, call_id=call_id)
        return {"result": result, "session_memory": state.short_term_memory if explicit_session else None,
                "tokens": child.tokens}

    def close(self) -> None:
        for cache in self._resources.values():
            cache.close()
        self._resources.clear()
