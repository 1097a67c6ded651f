"""A runner whose host stops calling starts no new record.

PyFlink's thread mode does not call the operator's ``close`` when its task is
cancelled or stopped with a savepoint; the runner's loop thread would go on
running the key's queued records (model calls, journal writes) beside the
task's next attempt. Seen on a standalone cluster: after ``flink stop``, a
stopped job's runner kept calling the model for 8 s, until its queue was
empty. ``KeyRunner(host_silence_s=...)`` pauses instead, and resumes when the
host calls again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, List

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.stores.memory_store import InMemoryJournalStore

STARTED: List[Any] = []
RUN_S = 0.2


async def slow(event: InputEvent, ctx: Any) -> None:
    STARTED.append(event.input)
    await asyncio.sleep(RUN_S)
    ctx.send_event(OutputEvent(output=event.input))


def _runner(host_silence_s: float | None) -> KeyRunner:
    STARTED.clear()
    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("slow", [InputEvent], slow)), {}, job_id="job",
                         store=InMemoryJournalStore())
    return KeyRunner(engine, host_silence_s=host_silence_s)


def _submit(runner: KeyRunner, count: int) -> None:
    state = KeyState(journal_id="job")
    for seq in range(count):
        state.pending.append(PendingRecord(seq, seq))
        state.next_seq = seq + 1
    runner.submit("k", state)


def test_a_silent_host_gets_no_new_runs_and_a_returning_one_resumes_them() -> None:
    runner = _runner(host_silence_s=0.5)
    try:
        _submit(runner, 10)
        time.sleep(2.0)  # the host is gone: nothing calls
        started_while_silent = list(STARTED)
        # Records start until the host was silent for 0.5 s, plus the one
        # then in progress: 0.5 / 0.2 -> at most 4 of 10.
        assert 1 <= len(started_while_silent) <= 4, started_while_silent
        time.sleep(0.5)
        assert STARTED == started_while_silent, "a record started while the host was silent"
        assert runner.has_work("k")  # the host calls again: the key resumes
        assert runner.wait_for("k", timeout_s=10)
        assert [c.seq for c in runner.take("k")] == list(range(10))
        assert STARTED == list(range(10))  # each once, in order
    finally:
        runner.close()


def test_a_host_waiting_on_the_runner_is_present() -> None:
    runner = _runner(host_silence_s=0.1)
    try:
        _submit(runner, 6)
        assert runner.wait_for("k", timeout_s=10), "the runner paused while its host waited for it"
        assert STARTED == list(range(6))
    finally:
        runner.close()


def test_without_host_silence_a_runner_never_pauses() -> None:
    runner = _runner(host_silence_s=None)
    try:
        _submit(runner, 6)
        time.sleep(6 * RUN_S + 0.8)
        assert STARTED == list(range(6))
    finally:
        runner.close()
