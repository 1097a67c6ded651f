"""The connection limiter with a job-wide window (``rate_limits.scope: job``,
``runtime.features.rate_limits.SharedWindow``): two limiters over one
in-memory store stand for two subtasks. Windows are 0.5 s."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, List

import pytest

from flink_agents.runtime.features.rate_limits import ConnectionLimiter, Limits, SharedWindow
from flink_agents.stores import InMemoryJournalStore, JournalUnavailableError

WINDOW_S = 0.5


def _limiter(store: Any, rpm: int = 1200, **limits: Any) -> ConnectionLimiter:
    """1200 per minute over 0.5 s: 10 per window, job-wide."""
    job = Limits(requests_per_minute=rpm, **limits)
    shared = SharedWindow(store, '["job", "c"]', job, WINDOW_S, lambda fn, *args: asyncio.to_thread(fn, *args))
    return ConnectionLimiter("c", job, window_s=WINDOW_S, shared=shared)


async def _calls(limiter: ConnectionLimiter, count: int, started: List[float], tag: Any = None,
                 order: List[Any] | None = None) -> None:
    async def one(i: int) -> None:
        async def run() -> str:
            started.append(time.monotonic())
            if order is not None:
                order.append((tag, i))
            return "ok"
        await limiter.call(run, 0)

    tasks = []
    for i in range(count):
        tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)


def _max_in_any_window(times: List[float], window_s: float) -> int:
    times, best, start = sorted(times), 0, 0
    for end, at in enumerate(times):
        while times[start] <= at - window_s:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_two_limiters_share_the_window_and_keep_their_fifo_order() -> None:
    store = InMemoryJournalStore()
    limiters = [_limiter(store), _limiter(store)]
    started: List[float] = []
    order: List[Any] = []

    async def main() -> None:
        await asyncio.gather(*(_calls(limiter, 12, started, n, order) for n, limiter in enumerate(limiters)))

    began = time.monotonic()
    asyncio.run(main())
    assert _max_in_any_window(started, WINDOW_S) == 10
    assert time.monotonic() - began < 1.4  # 24 calls: 10, 10 after 0.5 s, 4 after 1 s
    for n in (0, 1):
        assert [i for tag, i in order if tag == n] == list(range(12))  # each subtask's own turns in order
    assert sum(limiter.waited_calls for limiter in limiters) >= 14


def test_max_concurrent_requests_stays_the_subtasks_own() -> None:
    assert Limits(600, 9000, 8).job_scoped(4) == Limits(600, 9000, 2)


def test_a_call_cancelled_while_its_claim_waits_counts_nothing() -> None:
    store = InMemoryJournalStore()
    limiter = _limiter(store, rpm=120)  # 1 per 0.5 s

    async def main() -> None:
        await limiter.call(_ok, 0)
        waiting = asyncio.ensure_future(limiter.call(_ok, 0))
        await asyncio.sleep(0.1)  # refused by the store, waiting
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0.05)
        assert limiter._in_flight == 0 and not limiter._claiming
        assert len(store._rate_scopes()['["job", "c"]']) == 1  # the first call's claim only
        began = time.monotonic()
        await limiter.call(_ok, 0)  # the queue goes on: this one takes the next place
        assert time.monotonic() - began < 0.6

    asyncio.run(main())


def test_a_store_failure_fails_the_call_and_the_queue_goes_on() -> None:
    store = InMemoryJournalStore()
    limiter = _limiter(store)
    real_claim = store.claim
    failures = [JournalUnavailableError("the store is down", operation="claim")]

    def claim(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_claim(*args, **kwargs)

    store.claim = claim  # type: ignore[method-assign]

    async def main() -> None:
        first = asyncio.ensure_future(limiter.call(_ok, 0))
        second = asyncio.ensure_future(limiter.call(_ok, 0))
        with pytest.raises(JournalUnavailableError):
            await first
        assert await second == "ok"
        assert limiter._in_flight == 0

    asyncio.run(main())


def test_a_failed_restamp_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryJournalStore()
    limiter = _limiter(store)

    def restamp(*args: Any, **kwargs: Any) -> Any:
        raise JournalUnavailableError("the store is down", operation="restamp")

    store.restamp = restamp  # type: ignore[method-assign]

    async def main() -> None:
        await limiter.call(_ok, 0)
        await asyncio.sleep(0.1)

    with caplog.at_level(logging.WARNING, logger="flink_agents.runtime.features.rate_limits"):
        asyncio.run(main())
    assert any("restamp of claim" in record.getMessage() and "the store is down" in record.getMessage()
               for record in caplog.records)


async def _ok() -> str:
    return "ok"
