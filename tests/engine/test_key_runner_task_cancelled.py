"""A host waiting on the runner when Flink cancels its task stops waiting.

In thread mode the operator waits on the task's own thread: for capacity
when the backlog is full (back-pressure), for runs in flight at a watermark.
Flink cancels a task by interrupting that thread, which a Python wait does
not see; seen on a standalone cluster: a failover waited 57 s for the
surviving subtask, blocked on back-pressure behind model calls that never
answered, until their 60 s timeout. ``KeyRunner(host_cancelled=...)`` asks
between slices of the wait, and once the task is cancelled stops the runner
and raises ``HostCancelled`` into the task.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

from flink_agents.api.agents.agent import Agent
from flink_agents.api.events.event import InputEvent, OutputEvent
from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.engine import AgentEngine
from flink_agents.runtime.errors import HostCancelled
from flink_agents.runtime.execution.state import KeyState, PendingRecord
from flink_agents.runtime.scheduling.key_runner import KeyRunner
from flink_agents.stores.memory_store import InMemoryJournalStore

STARTED: List[Any] = []


async def never_answered(event: InputEvent, ctx: Any) -> None:
    STARTED.append(event.input)
    await asyncio.sleep(60)  # a model call held by a server that never answers
    ctx.send_event(OutputEvent(output=event.input))


class TaskThread:
    """The interrupt flag of the host's task thread, as Flink would set it."""

    def __init__(self) -> None:
        self.interrupted = threading.Event()
        self.asked_from: set[str] = set()

    def __call__(self) -> bool:
        self.asked_from.add(threading.current_thread().name)
        return self.interrupted.is_set()

    def cancel_after(self, delay_s: float) -> None:
        threading.Timer(delay_s, self.interrupted.set).start()


def _runner(task: TaskThread | None) -> KeyRunner:
    STARTED.clear()
    engine = AgentEngine(AgentPlan.from_agent(Agent().add_action("call", [InputEvent], never_answered)), {},
                         job_id="job", store=InMemoryJournalStore())
    return KeyRunner(engine, max_concurrent_runs=1, max_backlog=1, host_cancelled=task)


def _submit(runner: KeyRunner, key: str, count: int) -> None:
    state = KeyState(journal_id="job")
    for seq in range(count):
        state.pending.append(PendingRecord(seq, f"{key}{seq}"))
        state.next_seq = seq + 1
    runner.submit(key, state)


def _wait_until_started() -> None:
    """Until the first record's run started on the runner's thread: a first
    run in a fresh interpreter may take a while on a loaded machine (CI saw
    one still unstarted after 0.5 s), and the waits below are timed."""
    deadline = time.monotonic() + 10
    while not STARTED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert STARTED == ["k0"]


def test_back_pressure_ends_when_the_task_is_cancelled_and_no_new_run_starts() -> None:
    task = TaskThread()
    runner = _runner(task)
    try:
        _submit(runner, "k", 3)  # one runs (and never ends), two wait: the backlog is full
        _wait_until_started()
        task.cancel_after(0.3)
        started = time.monotonic()
        with pytest.raises(HostCancelled):
            runner.wait_for_capacity()
        assert time.monotonic() - started < 2.0, "the wait outlasted the cancellation"
        assert task.asked_from == {threading.current_thread().name}  # asked on the host's (task's) thread
        time.sleep(0.3)
        assert STARTED == ["k0"], "a record started after the task was cancelled"
        assert not runner._thread.is_alive()  # the runner stopped: nothing runs beside the next attempt
    finally:
        runner.close()


def test_a_watermark_waiting_in_short_slices_ends_when_the_task_is_cancelled() -> None:
    task = TaskThread()
    runner = _runner(task)
    try:
        _submit(runner, "k", 1)
        task.cancel_after(0.3)
        started = time.monotonic()
        with pytest.raises(HostCancelled):
            while not runner.wait_for("k", 0, 0.05):  # as KeyedHost waits for runs in flight
                pass
        assert time.monotonic() - started < 2.0
    finally:
        runner.close()


def test_a_task_not_cancelled_waits_as_long_as_asked() -> None:
    task = TaskThread()
    runner = _runner(task)
    try:
        _submit(runner, "k", 1)
        _wait_until_started()
        started = time.monotonic()
        assert runner.wait_for("k", 0, 0.5) is False  # the run goes on: a timed wait just times out
        assert 0.45 <= time.monotonic() - started < 2.0
        assert STARTED == ["k0"] and runner._thread.is_alive()
    finally:
        runner.close()
