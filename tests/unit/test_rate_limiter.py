"""The connection limiter on its own (``runtime.features.rate_limits``):
windows, FIFO turns, concurrency, tokens, cool-downs, shares; and full
jitter in every retry loop (``flink_agents._backoff``).

Windows are shrunk (``window_s``) so a test takes well under a second of
real time; the per-minute arithmetic is the same.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, List

import pytest

from flink_agents._backoff import backoff_ceiling_s, full_jitter
from flink_agents.api.chat_message import ChatMessage, MessageRole
from flink_agents.api.chat_models.errors import (
    ModelOverloaded, ModelRateLimited, ModelServerError, error_for_status, retry_after_s,
)
from flink_agents.runtime.execution.error_policy import ErrorPolicy
from flink_agents.runtime.execution.metrics import MetricRegistry
from flink_agents.runtime.features.rate_limits import ConnectionLimiter, Limits, RateLimits, estimate_tokens
from flink_agents.stores.retry import StoreRetry
from tests.support.rate_limited_server import most_in_any_window



async def _call_many(limiter: ConnectionLimiter, count: int, tokens: int = 0, work_s: float = 0.0) -> List[float]:
    started: List[float] = []

    async def one() -> None:
        async def run() -> str:
            started.append(time.monotonic())
            await asyncio.sleep(work_s)
            return "ok"
        await limiter.call(run, tokens)

    await asyncio.gather(*(one() for _ in range(count)))
    return started


def test_requests_never_exceed_the_window_and_use_all_of_it() -> None:
    # 1200 per minute over a 0.5 s window: 10 per window.
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=1200), window_s=0.5)
    began = time.monotonic()
    started = asyncio.run(_call_many(limiter, 25))
    took = time.monotonic() - began
    assert most_in_any_window(started, 0.5) == 10
    assert 1.0 <= took < 1.4  # 10 at once, 10 after 0.5 s, 5 after 1 s: no slack left unused


def test_turns_are_taken_in_arrival_order() -> None:
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=240), window_s=0.5)  # 2 per window
    order: List[int] = []

    async def main() -> None:
        async def one(i: int) -> None:
            async def run() -> None:
                order.append(i)
            await limiter.call(run, 0)
        tasks = []
        for i in range(6):
            tasks.append(asyncio.ensure_future(one(i)))
            await asyncio.sleep(0)  # arrive one after another
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == list(range(6))


def test_a_call_nobody_holds_back_is_granted_at_once_and_counted_as_a_queued_one_is() -> None:
    """An uncontended call takes its turn without queueing (no future, no
    loop round); it counts in the windows and the concurrency bound all the
    same, and once they are full the next call waits its turn."""
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=240, max_concurrent_requests=5), window_s=0.5)

    async def main() -> List[float]:
        loop = asyncio.get_running_loop()
        created = []
        real = loop.create_future
        loop.create_future = lambda: created.append(1) or real()  # type: ignore[method-assign]
        first = await limiter.acquire()
        second = await limiter.acquire()
        assert created == [] and limiter._in_flight == 2  # both at once, no future
        began = time.monotonic()
        third = await limiter.acquire()  # 2 per window: waits for the first to age out
        assert created == [1] and time.monotonic() - began >= 0.4
        for permit in (first, second, third):
            limiter.release(permit, None)
        return []

    asyncio.run(main())
    assert limiter._in_flight == 0


def test_max_concurrent_requests_bounds_calls_in_flight() -> None:
    limiter = ConnectionLimiter("c", Limits(max_concurrent_requests=3))
    in_flight = peak = 0

    async def main() -> None:
        async def one() -> None:
            async def run() -> None:
                nonlocal in_flight, peak
                in_flight += 1
                peak = max(peak, in_flight)
                await asyncio.sleep(0.02)
                in_flight -= 1
            await limiter.call(run, 0)
        await asyncio.gather(*(one() for _ in range(12)))

    asyncio.run(main())
    assert peak == 3


def test_waiting_holds_no_thread() -> None:
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=120), window_s=0.5)  # 1 per window
    threads_before = threading.active_count()
    seen: List[int] = []

    async def main() -> None:
        async def one() -> None:
            async def run() -> None:
                seen.append(threading.active_count())
            await limiter.call(run, 0)
        tasks = [asyncio.ensure_future(one()) for _ in range(200)]
        await asyncio.sleep(0.2)  # 199 wait
        assert len(seen) == 1 and len(limiter._waiters) == 199
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    assert max(seen) <= threads_before + 1  # the loop's own default executor at most


def test_a_cancelled_waiter_takes_no_turn() -> None:
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=240), window_s=0.5)  # 2 per window

    async def main() -> List[float]:
        ran: List[float] = []

        async def run() -> None:
            ran.append(time.monotonic())

        await limiter.call(run, 0)
        waiting = asyncio.ensure_future(limiter.call(run, 0))
        await limiter.call(run, 0)
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        began = time.monotonic()
        await limiter.call(run, 0)  # the cancelled one left its place: the window opens at 0.5 s
        return [began, ran[-1]]

    began, last = asyncio.run(main())
    assert len(limiter._waiters) == 0 and limiter._in_flight == 0
    assert last - began < 0.6


class _Reply:
    def __init__(self, input_tokens: int, output_tokens: int) -> None:
        self.extra_args = {"usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}


def test_tokens_are_estimated_before_and_corrected_to_the_reported_usage() -> None:
    # 12000 tokens per minute over 0.5 s: 100 per window.
    limiter = ConnectionLimiter("c", Limits(tokens_per_minute=12000), window_s=0.5)

    async def main() -> float:
        async def heavy() -> _Reply:
            return _Reply(60, 35)  # estimated 10, used 95

        await limiter.call(heavy, 10)
        began = time.monotonic()
        await limiter.call(heavy, 10)  # 95 + 10 > 100: waits for the window
        return time.monotonic() - began

    assert 0.4 <= asyncio.run(main()) < 0.7


def test_a_request_larger_than_the_window_goes_alone() -> None:
    limiter = ConnectionLimiter("c", Limits(tokens_per_minute=1200), window_s=0.5)  # 10 per window

    async def main() -> None:
        async def run() -> None:
            return None
        await asyncio.wait_for(limiter.call(run, 500), 0.2)

    asyncio.run(main())


def test_estimate_counts_characters_and_messages() -> None:
    messages = [ChatMessage(role=MessageRole.USER, content="x" * 40), ChatMessage(role=MessageRole.SYSTEM, content="y")]
    assert estimate_tokens(messages) == (10 + 4) + (1 + 4)
    assert estimate_tokens("abcd") == 5


def test_a_429_with_retry_after_holds_every_call_of_the_connection() -> None:
    registry = MetricRegistry()
    limiter = ConnectionLimiter("c", Limits(), registry.root.get_sub_group("connection", "c"))

    async def main() -> List[float]:
        async def refused() -> None:
            raise ModelRateLimited("slow down", "openai", 429, retry_after_s=0.3)

        starts: List[float] = []

        async def ok() -> None:
            starts.append(time.monotonic())

        began = time.monotonic()
        with pytest.raises(ModelRateLimited):
            await limiter.call(refused, 0)
        await asyncio.gather(*(limiter.call(ok, 0) for _ in range(3)))
        return [s - began for s in starts]

    offsets = asyncio.run(main())
    assert len(offsets) == 3 and all(0.29 <= o < 0.45 for o in offsets)
    snapshot = registry.snapshot()
    assert snapshot["connection.c.modelRateLimited"] == 1
    assert snapshot["connection.c.rateLimitCoolDownMs"] == 300
    assert snapshot["connection.c.rateLimitWaits"] == 3
    assert snapshot["connection.c.rateLimitWaitMs"]["count"] == 4
    assert snapshot["connection.c.rateLimitWaitMs"]["max"] >= 290


def test_overload_without_retry_after_backs_off_with_jitter_and_other_errors_do_not() -> None:
    limiter = ConnectionLimiter("c", Limits())
    delays = [limiter.refused(ModelOverloaded("busy", "anthropic", 529)) for _ in range(6)]
    ceilings = [backoff_ceiling_s(n, 0.5, 30.0) for n in range(6)]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings))
    assert len(set(delays)) > 1
    limiter.answered()
    assert limiter.refused(ModelRateLimited("x")) <= 0.5  # a success starts the backoff again

    other = ConnectionLimiter("d", Limits())

    async def main() -> None:
        async def broken() -> None:
            raise ModelServerError("boom", "openai", 500)
        with pytest.raises(ModelServerError):
            await other.call(broken, 0)

    asyncio.run(main())
    assert other._cool_down_until == 0.0 and other.refusals_seen == 0


def test_retry_after_headers_are_read() -> None:
    assert retry_after_s({"retry-after": "2"}) == 2.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({}) is None and retry_after_s(None) is None and retry_after_s({"retry-after": "soon"}) is None
    assert error_for_status(429, "x", "openai", retry_after_s=3.0).retry_after_s == 3.0
    assert error_for_status(503, "x", "openai", retry_after_s=1.0).retry_after_s == 1.0


def test_each_subtask_takes_its_share_and_the_descriptor_wins_over_the_config() -> None:
    assert Limits(600, 100_000, 8).share(4) == Limits(150, 25_000, 2)
    assert Limits(5, None, 1).share(8) == Limits(1, None, 1)
    limits = RateLimits({"rate_limits": {"conn": {"requests_per_minute": 600, "tokens_per_minute": 9000}},
                         "rate_limits.conn.max_concurrent_requests": "4"}, parallelism=3)
    assert limits.limits_of("conn", {"tokens_per_minute": 3000}) == Limits(600, 3000, 4)
    assert limits.limits_of("other", {}) == Limits()
    with pytest.raises(ValueError, match="'conn'.*requests_per_minute"):
        limits.limits_of("conn", {"requests_per_minute": 0})


def test_a_sync_chat_on_a_worker_thread_waits_for_its_turn_on_the_loop() -> None:
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=120), window_s=0.5)  # 1 per window

    async def main() -> List[float]:
        async def first() -> None:
            return None
        await limiter.call(first, 0)  # binds the loop, takes the window's turn
        began = time.monotonic()
        await asyncio.to_thread(limiter.call_blocking, lambda: None, 0)
        return [time.monotonic() - began]

    (waited,) = asyncio.run(main())
    assert 0.4 <= waited < 0.7


# -- jitter ---------------------------------------------------------------------


def test_full_jitter_draws_below_the_capped_ceiling() -> None:
    assert [backoff_ceiling_s(n, 0.1, 1.0) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    draws = [full_jitter(0.8) for _ in range(200)]
    assert all(0 <= d <= 0.8 for d in draws) and len(set(draws)) > 150
    assert full_jitter(0.0) == 0.0
    assert full_jitter(1.0, lambda low, high: high) == 1.0


def test_store_retry_waits_vary_within_their_ceilings() -> None:
    retry = StoreRetry(timeout_s=5, initial_backoff_s=0.05, max_backoff_s=0.4)
    runs = [list(zip(range(8), retry.backoffs())) for _ in range(20)]
    ceilings = list(zip(range(8), retry.ceilings()))
    for run in runs:
        assert all(0 <= wait <= ceiling for (_, wait), (_, ceiling) in zip(run, ceilings))
    assert len({tuple(run) for run in runs}) == 20
    assert [w for _, w in zip(range(5), StoreRetry(jitter=False).backoffs())] == [0.05, 0.1, 0.2, 0.4, 0.8]


def test_the_error_policy_backoff_varies_within_its_ceiling() -> None:
    policy = ErrorPolicy(strategy="retry", max_attempts=5, initial_backoff_s=0.1, max_backoff_s=1.0)
    assert [policy.backoff_ceiling_s(a) for a in range(1, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    draws = [policy.backoff_s(4) for _ in range(100)]
    assert all(0 <= d <= 0.8 for d in draws) and len(set(draws)) > 50
    assert policy.backoff_s(5, uniform=lambda low, high: high) == 1.0


def test_a_request_counts_from_its_end_once_it_ended() -> None:
    # 1 per 0.5 s window; the first call takes 0.2 s: the provider may have
    # seen it as late as its end, so the next starts 0.5 s after that end.
    limiter = ConnectionLimiter("c", Limits(requests_per_minute=120), window_s=0.5)

    async def main() -> float:
        async def slow() -> None:
            await asyncio.sleep(0.2)

        began = time.monotonic()
        await limiter.call(slow, 0)
        await limiter.call(slow, 0)
        return time.monotonic() - began

    assert 0.9 <= asyncio.run(main()) < 1.2  # 0.2 + 0.5 + 0.2
