"""The host core's polling cadence on a host with timers (the Flink
operator's), with fakes for Flink's timer service behind the driver port: a key whose run waits for a callback polls every
``flink.parked_poll_interval_ms``, any other busy key every
``flink.poll_interval_ms`` (no mini-cluster needed)."""

from __future__ import annotations

from typing import Any, List

from flink_agents.runtime.execution.metrics import RunCounters
from flink_agents.runtime.flink.driver import FlinkDriver
from flink_agents.runtime.keyed_host import KeyedHost


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
        self.run_control = None


class BusyRunner:
    def __init__(self, held: bool = False) -> None:
        self.held = held

    def has_work(self, key: Any) -> bool:
        return True

    def is_held(self, key: Any) -> bool:
        return self.held


def _host(open_callbacks: bool, armed: bool, timers: FakeTimers, held: bool = False) -> KeyedHost:
    driver = FlinkDriver(None, None)
    driver.begin("k", timers)
    host = KeyedHost(
        FakeEngine(FakeHub(open_callbacks)), driver, BusyRunner(held),  # type: ignore[arg-type]
        poll_interval_ms=100, parked_poll_interval_ms=5000,
    )
    if armed:
        host._deadlines["k"] = {"cb": (10**13, 0)}
    return host


def test_a_key_waiting_for_a_callback_polls_at_the_parked_interval() -> None:
    timers = FakeTimers(now=1_000_050)
    _host(open_callbacks=True, armed=True, timers=timers)._after_callback("k")
    # The next poll, and the one after it (kept ahead so a checkpoint that
    # misses the newest registration still holds a poll: _schedule).
    assert timers.processing == [1_005_000, 1_010_000]


def test_other_busy_keys_poll_at_the_normal_interval() -> None:
    for open_callbacks, armed in ((False, True), (True, False), (False, False)):
        timers = FakeTimers(now=1_000_050)
        _host(open_callbacks, armed, timers)._after_callback("k")
        assert timers.processing == [1_000_100, 1_000_200], (open_callbacks, armed)


def test_a_key_paused_by_run_control_polls_at_the_parked_interval() -> None:
    # Its records wait for a resume that may take hours: a timer each
    # poll_interval_ms per paused key would cost as a busy key does.
    timers = FakeTimers(now=1_000_050)
    _host(open_callbacks=False, armed=False, timers=timers, held=True)._after_callback("k")
    assert timers.processing == [1_005_000, 1_010_000]
