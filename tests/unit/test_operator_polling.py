"""The agent operator's polling cadence, with fakes for Flink's timer
service: a key whose run waits for a callback polls every
``flink.parked_poll_interval_ms``, any other busy key every
``flink.poll_interval_ms`` (no mini-cluster needed)."""

from __future__ import annotations

from typing import Any, List

from flink_agents.plan.agent_plan import AgentPlan
from flink_agents.runtime.flink.operator import AgentOperatorFunction
from flink_agents.runtime.execution.metrics import RunCounters
from tests.engine.test_callbacks import WaitingAgent


class FakeTimers:
    def __init__(self, now: int) -> None:
        self.now = now
        self.processing: List[int] = []

    def current_processing_time(self) -> int:
        return self.now

    def register_processing_time_timer(self, at: int) -> None:
        self.processing.append(at)

    def register_event_time_timer(self, at: int) -> None:
        pass


class FakeHub:
    def __init__(self, open_callbacks: bool) -> None:
        self.open_callbacks = open_callbacks

    def has_open_callbacks(self, key_text: str) -> bool:
        return self.open_callbacks


class FakeEngine:
    def __init__(self, hub: Any) -> None:
        self.callbacks = hub
        self.counters = RunCounters()


class BusyRunner:
    def has_work(self, key: Any) -> bool:
        return True


class FakeCounter:
    def inc(self, n: int) -> None:
        pass

    def dec(self, n: int) -> None:
        pass


def _operator(open_callbacks: bool, armed: bool) -> AgentOperatorFunction:
    operator = AgentOperatorFunction(
        AgentPlan.from_agent(WaitingAgent()),
        {"flink.poll_interval_ms": 100, "flink.parked_poll_interval_ms": 5000},
        "job",
    )
    operator._engine = FakeEngine(FakeHub(open_callbacks))  # type: ignore[assignment]
    operator._runner = BusyRunner()  # type: ignore[assignment]
    operator._metrics = {name: FakeCounter() for name in RunCounters().as_dict()}
    operator._reported = {name: 0 for name in RunCounters().as_dict()}
    if armed:
        operator._deadlines["k"] = {"cb": (10**13, 0)}
    return operator


def test_a_key_waiting_for_a_callback_polls_at_the_parked_interval() -> None:
    timers = FakeTimers(now=1_000_050)
    _operator(open_callbacks=True, armed=True)._after_callback(timers, "k")
    # The next poll, and the one after it (kept ahead so a checkpoint that
    # misses the newest registration still holds a poll: _schedule).
    assert timers.processing == [1_005_000, 1_010_000]


def test_other_busy_keys_poll_at_the_normal_interval() -> None:
    for open_callbacks, armed in ((False, True), (True, False), (False, False)):
        timers = FakeTimers(now=1_000_050)
        _operator(open_callbacks, armed)._after_callback(timers, "k")
        assert timers.processing == [1_000_100, 1_000_200], (open_callbacks, armed)
