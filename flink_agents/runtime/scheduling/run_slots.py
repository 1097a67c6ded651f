"""Run slots: at most N runs in progress at once, not counting parked ones.

A run takes a slot when it starts (``RunSlots.take_now``, else ``take``) and
gives it back when it ends (``release``). A run that waits for something
outside, such as a callback that may take hours, parks (``parked()``): it
gives its slot back while it waits and takes one again before it goes on, so
waiting runs never starve runnable ones. The slot of the current run travels
in a context variable (``enter``/``exit``), which asyncio copies into tasks
the run starts (``gather``), so code deep in a run parks without being
handed anything.

Slots are counted here, not with an ``asyncio.Semaphore``: a run taking a
free slot (nearly every run) then takes it without a coroutine, once per
record. Waiters are served first come, first served.
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import asynccontextmanager
from contextvars import ContextVar, Token
from typing import Any, AsyncIterator, Deque, Optional

__all__ = ["RunSlots", "parked"]


class _Slot:
    """One run's slot; parked while ``parks`` > 0 (several tasks may park)."""

    __slots__ = ("slots", "parks", "held")

    def __init__(self, slots: "RunSlots") -> None:
        self.slots = slots
        self.parks = 0
        self.held = True


_current: ContextVar[Optional[_Slot]] = ContextVar("flink_agents_run_slot", default=None)


class RunSlots:
    """At most ``limit`` unparked runs at once, on one event loop.

    Raises:
        ValueError: ``limit`` < 1.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"max_concurrent_runs must be >= 1, not {limit}")
        self._free = limit
        self._waiters: Deque["asyncio.Future[None]"] = deque()

    @property
    def free(self) -> int:
        """Slots no run holds now."""
        return self._free

    def take_now(self) -> _Slot | None:
        """A held slot if one is free and no run waits for one; else None."""
        return _Slot(self) if self._take_free() else None

    def _take_free(self) -> bool:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def take(self) -> _Slot:
        """A held slot, waiting in line for one if none is free.

        Raises:
            asyncio.CancelledError: Cancelled while waiting; no slot is held.
        """
        slot = self.take_now()
        if slot is not None:
            return slot
        await self._wait_in_line()
        return _Slot(self)

    def release(self, slot: _Slot) -> None:
        """Give ``slot`` back (nothing if it is given back already: parked)."""
        if slot.held:
            slot.held = False
            self._give()

    @staticmethod
    def enter(slot: _Slot) -> "Token[Optional[_Slot]]":
        """Make ``slot`` the current run's (for ``parked``, in this context
        and the tasks it starts); ``exit`` with the token undoes it."""
        return _current.set(slot)

    @staticmethod
    def exit(token: "Token[Optional[_Slot]]") -> None:
        _current.reset(token)

    def hold(self) -> "_Hold":
        """``async with slots.hold():`` holds a slot for the run inside the
        block (waits for a free one)."""
        return _Hold(self)

    async def _wait_in_line(self) -> None:
        """Wait until a slot is handed over (counted for the waiter already)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give()  # handed a slot, then cancelled: pass it on
            raise

    def _give(self) -> None:
        """A slot comes free: hand it to the first waiter still waiting."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


class _Hold:
    """``RunSlots.hold``'s block. Cancelled while it waits for a slot, it
    holds none and the block does not run."""

    __slots__ = ("_slots", "_slot", "_token")

    def __init__(self, slots: RunSlots) -> None:
        self._slots = slots
        self._slot: _Slot | None = None
        self._token: Token[Optional[_Slot]] | None = None

    async def __aenter__(self) -> None:
        self._slot = await self._slots.take()
        self._token = RunSlots.enter(self._slot)

    async def __aexit__(self, *exc_info: Any) -> bool:
        assert self._token is not None and self._slot is not None  # set by __aenter__
        RunSlots.exit(self._token)
        self._slots.release(self._slot)
        return False


@asynccontextmanager
async def parked() -> AsyncIterator[None]:
    """Give the current run's slot back for the block (no-op outside a run).

    Raises:
        asyncio.CancelledError: Cancelled while waiting for a slot again; the
            run then holds none, and ``release`` gives nothing back.
    """
    slot = _current.get()
    if slot is None:
        yield
        return
    slot.parks += 1
    if slot.parks == 1 and slot.held:
        slot.held = False
        slot.slots._give()
    try:
        yield
    finally:
        slot.parks -= 1
        if slot.parks == 0 and not slot.held:
            if not slot.slots._take_free():
                await slot.slots._wait_in_line()
            slot.held = True
