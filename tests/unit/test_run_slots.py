"""Run slots (``runtime.scheduling.run_slots``): at most N runs at once, the
waiting ones served in arrival order, a slot never lost to a cancellation,
and a parked run's slot lent to a runnable one."""

from __future__ import annotations

import asyncio
from typing import List

import pytest

from flink_agents.runtime.scheduling.run_slots import RunSlots, parked


def test_at_most_the_limit_hold_slots_and_waiters_are_served_in_arrival_order() -> None:
    async def main() -> List[str]:
        slots = RunSlots(2)
        first, second = slots.take_now(), slots.take_now()
        assert first is not None and second is not None
        assert slots.take_now() is None  # both slots held: no third run starts
        served: List[str] = []

        async def wait(name: str) -> None:
            slot = await slots.take()
            served.append(name)
            slots.release(slot)

        waiters = [asyncio.create_task(wait(name)) for name in ("a", "b", "c")]
        await asyncio.sleep(0)
        assert served == []
        slots.release(first)
        await asyncio.sleep(0)
        slots.release(second)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        assert slots.free == 2  # every slot back once the runs ended
        return served

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_a_waiter_cancelled_after_it_was_handed_a_slot_passes_the_slot_on() -> None:
    async def main() -> None:
        slots = RunSlots(1)
        held = slots.take_now()
        assert held is not None
        got: List[str] = []

        async def wait(name: str) -> None:
            slot = await slots.take()
            got.append(name)
            slots.release(slot)

        first, second = asyncio.create_task(wait("first")), asyncio.create_task(wait("second"))
        await asyncio.sleep(0)
        slots.release(held)  # handed to the first waiter...
        first.cancel()  # ...which is cancelled before it could run
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 5)  # a lost slot would leave it waiting
        assert got == ["second"]
        assert slots.free == 1  # the slot was neither lost nor counted twice

    asyncio.run(main())


def test_a_parked_run_lends_its_slot_and_takes_one_again_before_it_goes_on() -> None:
    async def main() -> None:
        slots = RunSlots(1)
        waiting_run = slots.take_now()
        assert waiting_run is not None
        token = slots.enter(waiting_run)
        other_ran = asyncio.Event()

        async def other() -> None:
            slot = await slots.take()  # runs only while the first run is parked
            other_ran.set()
            slots.release(slot)

        task = asyncio.create_task(other())
        async with parked():
            await asyncio.wait_for(other_ran.wait(), 5)
        await task
        assert waiting_run.held and slots.free == 0  # its slot is held again
        slots.exit(token)
        slots.release(waiting_run)
        assert slots.free == 1

    asyncio.run(main())


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_concurrent_runs must be >= 1"):
        RunSlots(0)
